"""JSON that every layer of the platform can parse, store, hash and render.

A submitted value passes through `json.loads`, DRF validation, the request
fingerprint (recursive), PostgreSQL's `jsonb` and the JSON renderer, and
each refuses something the others accept. `json_problem` finds, in one
iterative walk (it must not itself hit the recursion limit it guards
against), the first part of a value that one of them would refuse:

- objects and arrays nested deeper than `max_depth` levels: recursive code
  downstream (DRF, `json.dumps`, the fingerprint) raises RecursionError
  near the interpreter's 1,000 frames;
- lone UTF-16 surrogates (U+D800-U+DFFF) in a string or an object key:
  `json.loads` decodes an escaped pair (`"\\ud83d\\ude00"`) into the one
  character it stands for, so any surrogate left is unpaired; it cannot be
  encoded as UTF-8 and `jsonb` refuses it;
- NUL (U+0000) in a string or key: `jsonb` and PostgreSQL text refuse it;
- numbers that are not finite: NaN and Infinity are not JSON, and a
  literal such as `1e400` overflows a float to infinity.

Huge integers are fine (`json.loads` already stops at 4,300 digits,
`jsonb` stores up to 131,072); so are negative zero, characters outside
the Basic Multilingual Plane and bidirectional controls: they are data.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

_SURROGATE_RE = re.compile("[\ud800-\udfff]")
# Escaped when a key or value is echoed back in an error: characters a JSON
# encoder cannot encode as UTF-8 (surrogates), NUL and the other C0/C1
# controls, and the bidirectional controls that could reorder what a reader
# sees (Unicode TR9: LRM, RLM, ALM, LRE..RLO, LRI..PDI).
_UNPRINTABLE_RE = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


@dataclass(frozen=True)
class JsonProblem:
    """What is wrong, and where: `path` is dotted ("payload.body.0.t"), printable."""

    path: str
    reason: str


def printable(text: str) -> str:
    """`text` with surrogates, control and bidi characters written as `\\uXXXX` escapes.

    Safe to put in any error message: the result always encodes as UTF-8
    and reads in the order it is stored.
    """
    return _UNPRINTABLE_RE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def text_problem(text: str) -> str | None:
    """Why the string `text` cannot be stored, or None when it can."""
    if "\x00" in text:
        return "NUL characters (\\u0000) are not allowed."
    if not text.isascii():
        found = _SURROGATE_RE.search(text)
        if found:
            return (
                f"Lone UTF-16 surrogate \\u{ord(found.group()):04x} at character "
                f"{found.start()}: escape a character outside the Basic Multilingual Plane "
                "as a high-low pair (or send it as UTF-8); an unpaired half is not text."
            )
    return None


def _number_problem(value: float) -> str | None:
    if math.isfinite(value):
        return None
    return (
        "Not a finite number: NaN, Infinity and literals beyond ±1.8e308 (such as 1e400) "
        "are not JSON numbers and cannot be stored."
    )


# A path as a chain of (parent link, key) pairs, joined into text only
# for the value at fault: most walks find nothing and build no path.
_Link = tuple[Any, str | int] | None


def _path(root: str, link: _Link, *keys: str | int) -> str:
    parts: list[str | int] = list(reversed(keys))
    while link is not None:
        link, key = link
        parts.append(key)
    text = [printable(k) if isinstance(k, str) else str(k) for k in reversed(parts)]
    return ".".join([root, *text] if root else text) or "body"


def json_problem(value: Any, *, path: str, max_depth: int, depth: int = 1) -> JsonProblem | None:
    """The first part of `value` that cannot be stored, hashed or rendered, else None.

    `path` names `value` in the request ("payload"; "" for a whole body,
    whose members are then named by their own keys); `depth` is its level
    (1 for a top-level field's value, 0 for a whole body). An object or
    array deeper than `max_depth` levels is refused at the first such
    container, named by the first three parts of its path. Runs in time
    linear in the size of `value`, without recursion.
    """
    if not isinstance(value, dict | list):
        reason = _scalar_problem(value)
        return JsonProblem(path or "body", reason) if reason else None
    # Containers still to visit: (container, its depth, its path link).
    stack: list[tuple[Any, int, _Link]] = [(value, depth, None)]
    while stack:
        item, level, link = stack.pop()
        if level > max_depth:
            where = _path(path, link)
            return JsonProblem(
                ".".join(where.split(".")[:3]),
                f"Objects and arrays nest more than {max_depth} levels deep; the limit is "
                f"{max_depth} (a top-level field's value, such as payload, is level 1).",
            )
        if len(item) > _WIDE and _wide_ok(item):
            continue
        members = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in members:
            if type(key) is str and not (key.isascii() and "\x00" not in key):
                reason = text_problem(key)
                if reason:
                    return JsonProblem(_path(path, link, key), f"Field name: {reason}")
            kind = type(child)
            if kind is dict or kind is list:
                stack.append((child, level + 1, (link, key)))
            elif kind is str or kind is float:
                reason = _scalar_problem(child)
                if reason:
                    return JsonProblem(_path(path, link, key), reason)
    return None


# Containers wider than this are first checked in bulk (in C); the walk
# only visits their members one by one when they hold containers, floats
# or a string that fails.
_WIDE = 16
_PLAIN = frozenset({int, bool, type(None)})


def _texts_ok(texts: Any) -> bool:
    joined = "".join(texts)
    return "\x00" not in joined and (joined.isascii() or not _SURROGATE_RE.search(joined))


def _wide_ok(item: dict[Any, Any] | list[Any]) -> bool:
    if isinstance(item, dict):
        if not (all(type(k) is str for k in item) and _texts_ok(item)):
            return False
        values: Any = item.values()
    else:
        values = item
    types = set(map(type, values))
    if types <= _PLAIN:
        return True
    if types <= _PLAIN | {str}:
        return _texts_ok(v for v in values if type(v) is str)
    return False


def _scalar_problem(value: Any) -> str | None:
    if isinstance(value, str):
        return text_problem(value)
    if isinstance(value, float):
        return _number_problem(value)
    return None
