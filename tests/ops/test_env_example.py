"""`.env.example` lists every environment variable the code reads, with its default and meaning.

Issue 9, Acceptance: "`.env.example` lists every environment variable the
code reads (a test compares it with the settings modules)."
"""

from __future__ import annotations

from tests.ops.settings_env import (
    DEVSTACK_SOURCES,
    REQUIRED,
    SOURCES,
    as_env_text,
    env_example,
    reads,
)

# The app's settings and the devstack's (ports, proxy limits, demo knobs).
EVERYTHING = (*SOURCES, *DEVSTACK_SOURCES)


def test_env_example_lists_every_variable_the_code_reads() -> None:
    read, documented = reads(EVERYTHING), env_example()
    missing = {name: r.places for name, r in read.items() if name not in documented}
    assert not missing, f"read by the code but not in .env.example: {missing}"


def test_env_example_lists_nothing_the_code_does_not_read() -> None:
    read, documented = reads(EVERYTHING), env_example()
    stale = [n for n, d in documented.items() if n not in read and not d.compose_only]
    assert not stale, (
        f"in .env.example but read by no code (nor under the compose section): {stale}"
    )


def test_env_example_gives_each_variable_a_meaning_and_its_default() -> None:
    for name, doc in env_example().items():
        assert len(doc.comment) > 15, f"{name}: no comment saying what it means"
        assert "default" in doc.comment.lower() or "required" in doc.comment.lower(), (
            f"{name}: its comment gives no default: {doc.comment!r}"
        )


def test_env_example_commented_defaults_are_the_code_defaults() -> None:
    # Given variables with one literal default in every place that reads them
    documented = env_example()
    mismatches = []
    for name, read in reads(EVERYTHING).items():
        if REQUIRED in read.defaults or name not in documented:
            continue
        texts = {as_env_text(default) for default in read.defaults}
        doc = documented[name]
        # then a commented-out line (the default applies) shows exactly that default
        if len(texts) == 1 and None not in texts and doc.commented:
            (expected,) = texts
            if doc.value != expected and not _same_number(doc.value, expected or ""):
                mismatches.append(f"{name}: .env.example {doc.value!r}, code {expected!r}")
    assert not mismatches, "\n".join(mismatches)


def _same_number(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return False
