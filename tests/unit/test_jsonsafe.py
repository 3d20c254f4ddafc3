"""jobs.jsonsafe: the one walk that finds JSON no layer below the API could store or render."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.jsonsafe import json_problem, printable, text_problem

LIMIT = 8


def _nest(depth: int, leaf: Any = None) -> Any:
    """`depth` levels of arrays around `leaf` ([] when None): _nest(2) == [[]]."""
    value: Any = [] if leaf is None else [leaf]
    for _ in range(depth - 1):
        value = [value]
    return value


def _depth(value: Any) -> int:
    """Levels of objects and arrays in `value` (0 for a scalar), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, level + 1) for child in children)
    return deepest


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        ({"body": {"t": "\ud83d"}}, "payload.body.t", "Lone UTF-16 surrogate \\ud83d"),
        ({"body": {"\ud83d": 1}}, "payload.body.\\ud83d", "Field name: Lone UTF-16 surrogate"),
        ({"a": ["ok", "x\udfffy"]}, "payload.a.1", "surrogate \\udfff at character 1"),
        ({"a": "x\x00"}, "payload.a", "NUL characters"),
        ({"k\x00": 1}, "payload.k\\u0000", "Field name: NUL"),
        ({"n": math.nan}, "payload.n", "Not a finite number"),
        ({"n": [1, -math.inf]}, "payload.n.1", "Not a finite number"),
        ({"wide": ["a"] * 40 + ["b\x00"]}, "payload.wide.40", "NUL characters"),
        (
            {"wide": {f"k{i}": i for i in range(40)} | {"\ud800": 0}},
            "payload.wide.\\ud800",
            "Field name",
        ),
    ],
    ids=[
        "surrogate-value",
        "surrogate-key",
        "low-surrogate-in-list",
        "nul-value",
        "nul-key",
        "nan",
        "minus-infinity",
        "nul-in-wide-list",
        "surrogate-key-in-wide-object",
    ],
)
def test_json_problem_names_the_path_and_the_reason(value: Any, path: str, reason: str) -> None:
    problem = json_problem(value, path="payload", max_depth=LIMIT)

    assert problem is not None
    assert problem.path == path
    assert reason in problem.reason


@pytest.mark.parametrize(
    "value",
    [
        {"n": -0.0, "big": 10**4000, "tiny": 1e-320, "max": 1.7976931348623157e308},
        {"emoji": "\U0001f600", "pair-key-\U0001f600": "\U0010ffff", "bidi": "\u202eabc\u2066"},
        {"ascii": "x" * 1000, "ints": list(range(100)), "flags": [True, False, None]},
        _nest(LIMIT),
    ],
    ids=["numbers", "astral-and-bidi", "plain", "at-the-depth-limit"],
)
def test_json_problem_accepts_what_every_layer_stores(value: Any) -> None:
    assert json_problem(value, path="payload", max_depth=LIMIT) is None


def test_json_problem_depth_limit_counts_the_top_level_value_as_level_one() -> None:
    assert json_problem(_nest(LIMIT), path="payload", max_depth=LIMIT) is None

    problem = json_problem(_nest(LIMIT + 1), path="payload", max_depth=LIMIT)

    assert problem is not None
    assert problem.path == "payload.0.0"
    assert f"nest more than {LIMIT} levels deep" in problem.reason


def test_json_problem_body_walk_counts_the_body_as_level_zero() -> None:
    body = {"kind": "k", "payload": _nest(LIMIT)}
    assert json_problem(body, path="", max_depth=LIMIT, depth=0) is None

    problem = json_problem({"payload": _nest(LIMIT + 1)}, path="", max_depth=LIMIT, depth=0)
    assert problem is not None
    assert problem.path == "payload.0.0"


@pytest.mark.parametrize("depth", [100, 1_000, 100_000])
def test_json_problem_never_recurses_at_any_depth(depth: int) -> None:
    problem = json_problem(_nest(depth), path="payload", max_depth=LIMIT)

    assert problem is not None
    assert problem.path.startswith("payload")


def test_json_problem_scalar_at_the_root() -> None:
    nul = json_problem("a\x00", path="", max_depth=LIMIT, depth=0)
    assert nul is not None
    assert nul.path == "body"
    assert json_problem(3, path="priority", max_depth=LIMIT) is None


def test_printable_escapes_surrogates_controls_and_bidi_only() -> None:
    assert printable("a\ud800b\x00c\u202ed\u2067é\U0001f600") == (
        "a\\ud800b\\u0000c\\u202ed\\u2067é\U0001f600"
    )


def test_text_problem_accepts_a_surrogate_pair_decoded_by_json() -> None:
    # json.loads joins an escaped pair into one character: nothing lone is left
    assert text_problem(json.loads('"\\ud83d\\ude00"')) is None
    assert text_problem(json.loads('"\\ud83d"')) is not None


# -- properties ---------------------------------------------------------------

_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(["\ud800", "\udfff", "\x00", "\u202e", "\U0001f600"]),
        st.characters(codec=None, exclude_categories=()),  # every code point, surrogates too
    ),
    max_size=8,
)
_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | _TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_TEXT, children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSONISH)
def test_json_problem_none_means_utf8_json_within_the_limit(value: Any) -> None:
    problem = json_problem(value, path="payload", max_depth=LIMIT)

    if problem is None:
        # what PostgreSQL's jsonb and the renderer need: strict JSON, UTF-8, bounded depth
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
        assert "\\u0000" not in encoded.decode()
        assert _depth(value) <= LIMIT
    else:
        assert problem.path.startswith("payload")
        printable(problem.path).encode("utf-8")  # an error can always be rendered
