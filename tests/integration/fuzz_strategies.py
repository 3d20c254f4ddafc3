"""Hypothesis strategies for hostile API input, written as JSON *text*.

Text, not Python values, so a body can hold what `json.dumps` never
writes: lone surrogate escapes (and CESU-8 bytes), NUL, bidirectional
controls, characters outside the BMP as escaped pairs or UTF-8, numbers
such as 1e400, -0.0, NaN, Infinity and integers of thousands of digits,
objects and arrays nested up to 3,000 deep. Most strategies take
`hostile`: False draws only what every layer must store and give back
(so about half the bodies are accepted and stored), True adds what no
layer can store. Used by tests/integration/fuzz.py.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from hypothesis import strategies as st

# -- strings ---------------------------------------------------------------------

# Characters every layer must store and give back unchanged.
UNUSUAL_CHARACTERS = [
    "\x1f",
    "\x7f",
    "\x85",  # NEL, a C1 control
    "\u200e",  # LRM
    "\u202e",  # RLO
    "\u2066",  # LRI
    "\u2069",  # PDI
    "\u061c",
    "\ufeff",  # BOM / ZWNBSP
    "\ufffd",
    "\U0001f600",  # 4 bytes in UTF-8, a surrogate pair in UTF-16
    "\U0010ffff",
    "\U00020000",
    "é",
    ".",
    '"',
    "\\",
]
# Characters no layer can store: lone surrogates and NUL.
HOSTILE_CHARACTERS = ["\ud800", "\udbff", "\ud83d", "\udc00", "\udfff", "\x00"]


def text(hostile: bool) -> st.SearchStrategy[str]:
    """Short strings; with `hostile`, also lone surrogates and NUL."""
    if hostile:
        characters = st.one_of(
            st.sampled_from(HOSTILE_CHARACTERS + UNUSUAL_CHARACTERS),
            st.characters(codec=None, exclude_categories=()),
        )
    else:
        characters = st.one_of(
            st.sampled_from(UNUSUAL_CHARACTERS),
            st.characters(codec="utf-8", exclude_characters="\x00"),
        )
    return st.lists(characters, max_size=12).map("".join)


def _json_string(value: str, ascii_only: bool) -> str:
    # ensure_ascii=True writes a lone surrogate as a \udXXX escape and an
    # astral character as an escaped pair; False leaves the characters
    # themselves (sent as UTF-8, or CESU-8 bytes for a lone surrogate).
    return json.dumps(value, ensure_ascii=ascii_only)


def string_text(hostile: bool) -> st.SearchStrategy[str]:
    """JSON string literals."""
    return st.builds(_json_string, text(hostile), st.booleans())


# -- numbers -----------------------------------------------------------------

STORABLE_NUMBERS = [
    "0",
    "-0",
    "-0.0",
    "0e0",
    "-0e-0",
    "1e-400",
    "123.456e-789",
    "1.7976931348623157e308",
    "5e-324",
    "4.9e-325",
    "9007199254740993",
    "-9223372036854775809",
    "18446744073709551616",
]
HOSTILE_NUMBERS = ["1e400", "-1e400", "1E+999", "1.8e308", "NaN", "Infinity", "-Infinity"]


def number_text(hostile: bool) -> st.SearchStrategy[str]:
    """JSON number literals (with `hostile`, also NaN, Infinity, overflowing and 6,000-digit ones)."""
    digits = st.integers(1, 6_000 if hostile else 1_000)
    return st.one_of(
        st.sampled_from(STORABLE_NUMBERS + (HOSTILE_NUMBERS if hostile else [])),
        st.integers(min_value=-(10**40), max_value=10**40).map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.builds(lambda n, sign: sign + "9" * n, digits, st.sampled_from(["", "-"])),
    )


# -- values ------------------------------------------------------------------


def _array(items: list[str]) -> str:
    return "[" + ",".join(items) + "]"


def _object(members: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{key}:{value}" for key, value in members) + "}"


def leaf_text(hostile: bool) -> st.SearchStrategy[str]:
    return st.one_of(
        string_text(hostile), number_text(hostile), st.sampled_from(["true", "false", "null"])
    )


def value_text(hostile: bool) -> st.SearchStrategy[str]:
    """Any JSON value: nested objects and arrays of the leaves above."""
    keys = string_text(hostile)
    return st.recursive(
        leaf_text(hostile),
        lambda children: st.one_of(
            st.lists(children, max_size=5).map(_array),
            st.lists(st.tuples(keys, children), max_size=5).map(_object),
        ),
        max_leaves=25,
    )


@st.composite
def deep_text(draw: st.DrawFn, hostile: bool) -> str:
    """A value nested deep: up to 60 levels when not hostile (inside the limit), else up to 3,000."""
    limit = 3_000 if hostile else 60
    depth = draw(st.one_of(st.integers(1, min(limit, 80)), st.integers(1, limit)))
    leaf = draw(leaf_text(hostile))
    shape = draw(st.sampled_from(["array", "object", "mixed"]))
    key = draw(string_text(hostile)) if draw(st.booleans()) else '"a"'
    opens, closes = [], []
    for level in range(depth):
        as_array = shape == "array" or (shape == "mixed" and level % 2 == 0)
        opens.append("[" if as_array else "{" + key + ":")
        closes.append("]" if as_array else "}")
    return "".join(opens) + leaf + "".join(reversed(closes))


def any_text(hostile: bool) -> st.SearchStrategy[str]:
    return st.one_of(value_text(hostile), deep_text(hostile))


# -- request bodies -------------------------------------------------------------

GOOD_URL = '"http://127.0.0.1:9/fuzz"'
# Values each kind's payload fields accept, so that most clean bodies are
# stored; hostile bodies replace some of them.
PLAUSIBLE_FIELDS: dict[str, dict[str, st.SearchStrategy[str]]] = {
    "webhook.deliver": {
        "url": st.just(GOOD_URL),
        "headers": st.dictionaries(
            st.sampled_from(["X-Trace", "x-a", "X-Émoji"]), text(False), max_size=3
        ).map(json.dumps),
        "connect_timeout": st.floats(0.1, 30).map(repr),
        "read_timeout": st.integers(1, 60).map(str),
    },
    "demo.flaky": {
        "fail_times": st.integers(0, 3).map(str),
        "sleep_seconds": st.sampled_from(["0", "0.0", "-0.0", "1e-400"]),
    },
    "report.csv_summary": {
        "source": st.sampled_from(['"http://127.0.0.1:9/a.csv"', '"var/data/x.csv"']),
        "delimiter": st.sampled_from(['","', '";"', '"\\t"']),
        "has_header": st.sampled_from(["true", "false"]),
        "distinct_cap": st.integers(1, 100).map(str),
    },
    "demo.sleep": {
        "seconds": st.sampled_from(["0", "0.5", "3600"]),
        "mode": st.sampled_from(['"cooperative"', '"swallow"', '"unkillable"']),
    },
    "demo.crash": {
        "signal": st.sampled_from(['"SIGKILL"', '"SIGTERM"']),
        "after_seconds": st.sampled_from(["0", "60"]),
    },
}
KINDS = sorted(PLAUSIBLE_FIELDS)


@st.composite
def payload_text(draw: st.DrawFn, kind: str, hostile: bool) -> str:
    """A payload for `kind`: its fields, mostly plausible; if `hostile`, some replaced."""
    members: list[tuple[str, str]] = []
    for name, plausible in PLAUSIBLE_FIELDS.get(kind, {}).items():
        if name != "url" and draw(st.booleans()):
            continue
        replace = hostile and draw(st.integers(0, 2)) == 0
        members.append((json.dumps(name), draw(leaf_text(True) if replace else plausible)))
    if kind == "webhook.deliver" and draw(st.booleans()):
        members.append(('"body"', draw(any_text(hostile))))
    if hostile and kind == "webhook.deliver" and draw(st.integers(0, 2)) == 0:
        pairs = st.tuples(string_text(True), st.one_of(string_text(True), number_text(True)))
        members.append(('"headers"', _object(draw(st.lists(pairs, min_size=1, max_size=3)))))
    if hostile and draw(st.integers(0, 3)) == 0:
        members.append((draw(string_text(True)), draw(any_text(True))))
    return _object(members)


# An Idempotency-Key an HTTP client can send and gunicorn accepts (RFC 9110
# field-value: visible ASCII, SP, HTAB, obs-text 0x80-0xFF; no leading or
# trailing whitespace). Control bytes are refused by gunicorn itself, with
# its own 400 page, before the application sees the request.
_HEADER_BYTES = st.sampled_from(
    [bytes([b]) for b in range(0x21, 0x7F)] + [bytes([b]) for b in range(0x80, 0x100)] + [b" "]
)
HEADER_VALUE = st.lists(_HEADER_BYTES, min_size=1, max_size=40).map(b"".join).map(bytes.strip)


@st.composite
def submission(draw: st.DrawFn) -> tuple[bytes, dict[str, bytes]]:
    """(body bytes, extra headers) of one POST /api/jobs/: clean about half the time."""
    hostile = draw(st.booleans())
    kind = (
        draw(st.one_of(st.sampled_from(KINDS), text(hostile)))
        if hostile
        else draw(st.sampled_from(KINDS))
    )
    members = [('"kind"', json.dumps(kind, ensure_ascii=draw(st.booleans())))]
    payload = payload_text(kind, hostile)
    members.append(('"payload"', draw(st.one_of(payload, any_text(True)) if hostile else payload)))
    optional = {
        '"queue"': st.just('"default"'),
        '"priority"': st.integers(0, 9).map(str),
        '"idempotency_key"': string_text(False),
    }
    for key, plausible in optional.items():
        if draw(st.integers(0, 3)) == 0:
            replace = hostile and draw(st.booleans())
            members.append((key, draw(leaf_text(True) if replace else plausible)))
    if hostile and draw(st.integers(0, 3)) == 0:
        members.append((draw(string_text(True)), draw(any_text(True))))
    if draw(st.integers(0, 9)) == 0:
        draw(st.randoms()).shuffle(members)
    # Lone surrogates left as characters (not escapes) become CESU-8 bytes.
    body = _object(members).encode("utf-8", "surrogatepass")
    headers: dict[str, bytes] = {}
    if draw(st.integers(0, 4)) == 0:
        header = draw(HEADER_VALUE)
        if header:
            headers["Idempotency-Key"] = header
    return body, headers


@st.composite
def list_query(draw: st.DrawFn) -> str:
    """A query string for GET /api/jobs/: its filters and page, with hostile names and values."""
    names = st.one_of(st.sampled_from(["status", "kind", "page", "page_size"]), text(True))
    values = st.one_of(
        st.sampled_from(["queued", "dead", "demo.flaky", "1", "0", "-1", "1e400", ""]),
        text(True),
        st.integers().map(str),
    )
    pairs = draw(st.lists(st.tuples(names, values), max_size=4))
    # Lone surrogates percent-encoded as CESU-8 bytes: not UTF-8, so Django
    # decodes them to U+FFFD; NUL as %00.
    return "&".join(
        quote(n.encode("utf-8", "surrogatepass"), safe="")
        + "="
        + quote(v.encode("utf-8", "surrogatepass"), safe="")
        for n, v in pairs
    )
