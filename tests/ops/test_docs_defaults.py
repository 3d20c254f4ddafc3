"""A default the READMEs name for an environment variable is the one the code has.

Issue 19, item 7: the README named two defaults for JOBS_TRACE_URL_TEMPLATE
(empty in its configuration table, Jaeger's URL in the text: the latter is
what docker-compose.yml sets). Every "`VAR` (default `X`" and "`VAR`
(default empty" in README.md and platform/README.md, and every row of the
README's configuration table whose default is "empty", must match the
default in the code that reads VAR (tests/ops/settings_env.py); a value
compose sets is named as compose's, and it must be what docker-compose.yml
sets.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.ops.settings_env import REQUIRED, as_env_text, reads

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", ROOT / "platform" / "README.md")
# "`VAR` (default `X`" or "`VAR` (default empty", across a line break.
INLINE = re.compile(r"`([A-Z][A-Z0-9_]+)`\s+\(default\s+(?:`([^`]*)`|(empty))")
TABLE_ROW = re.compile(r"^\| `([A-Z][A-Z0-9_]+)` \| ([^|]+) \|", re.MULTILINE)
# "compose sets `X`" / "`docker-compose.yml` sets `X`" right after a variable's default.
COMPOSE_SETS = re.compile(r"(?:compose|`docker-compose\.yml`) sets\s+`([^`]*)`")


def _named_defaults() -> list[tuple[str, str, str]]:
    """(where, variable, default as named) for every default the docs name."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in INLINE.finditer(text):
            value = "" if match.group(3) else match.group(2)
            found.append((f"{path.name}: {match.group(0)!r}", match.group(1), value))
        if path.name == "README.md" and path.parent == ROOT:
            for match in TABLE_ROW.finditer(text):
                if match.group(2).strip().startswith("empty"):
                    found.append((f"table row {match.group(1)}", match.group(1), ""))
    return found


def test_docs_name_defaults_at_all() -> None:
    names = {name for _, name, _ in _named_defaults()}
    assert {"REDIS_URL", "JOBS_TRACE_URL_TEMPLATE"} <= names, names


@pytest.mark.parametrize(("where", "name", "value"), _named_defaults())
def test_a_default_the_docs_name_is_the_code_default(where: str, name: str, value: str) -> None:
    read = reads()
    assert name in read, f"{where}: no code reads {name}"
    defaults = {as_env_text(d) for d in read[name].defaults if d is not REQUIRED}
    assert defaults == {value}, f"{where}: the docs say {value!r}, the code {defaults}"


def test_a_value_compose_sets_is_what_docker_compose_sets() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    environment = {
        name: str(value)
        for service in compose["services"].values()
        for name, value in (service.get("environment") or {}).items()
    }
    environment.update(
        (name, str(value))
        for anchor in compose.values()
        if isinstance(anchor, dict)
        for name, value in (anchor.get("environment") or {}).items()
    )
    checked = 0
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in INLINE.finditer(text):
            tail = text[match.end() : match.end() + 200]
            sets = COMPOSE_SETS.search(tail.split(")", 1)[0] + ")")
            if sets is None:
                continue
            checked += 1
            value = environment.get(match.group(1), "")
            # compose's "${VAR:-default}" form: the default is what it sets
            shown = re.sub(r"^\$\{[A-Z0-9_]+:-(.*)\}$", r"\1", value)
            assert shown == sets.group(1), f"{path.name}: compose sets {value!r}"
    assert checked >= 2
