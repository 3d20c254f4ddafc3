"""What the code reads from the environment, found in its source (AST), and .env.example parsed.

Every read goes through config/env.py's `env` (`env.str("NAME", default=...)`,
`env.int(...)`, ...), plus `os.environ.setdefault("DJANGO_SETTINGS_MODULE", ...)`
in the entry points, so a syntax walk finds them all.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.ops.tools import ROOT

SOURCES = (*sorted((ROOT / "config").rglob("*.py")), ROOT / "flowerconfig.py")
# `make demo`, `make up` and `make observe` (their ports, the proxy's limits).
DEVSTACK_SOURCES = tuple(sorted((ROOT / "devstack").rglob("*.py")))
COMPOSE_ONLY_HEADER = "## docker-compose.yml only"
_VARIABLE = re.compile(r"^(?P<commented>#\s*)?(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")
REQUIRED = object()


class Expression(str):
    """A default that is not a literal (e.g. `BASE_DIR / "var"`): its source text."""


@dataclass
class Read:
    """One variable read by the code: where, and its default expressions (REQUIRED: none)."""

    name: str
    places: list[str] = field(default_factory=list)
    defaults: list[object] = field(default_factory=list)


def reads(sources: tuple[Path, ...] = SOURCES) -> dict[str, Read]:
    """{variable: Read} for every environment read in `sources`.

    A default is the literal value when it is one (str, int, float, bool,
    list, dict) or arithmetic on numbers, else an Expression (its source text).
    """
    found: dict[str, Read] = {}
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            call = _env_call(node)
            if call is None:
                continue
            name, default = call
            read = found.setdefault(name, Read(name))
            read.places.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}")
            read.defaults.append(default)
    return found


def _env_call(node: ast.AST) -> tuple[str, object] | None:
    if not isinstance(node, ast.Call) or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    func = node.func
    is_env = (isinstance(func, ast.Name) and func.id == "env") or (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id == "env"
    )
    is_setdefault = isinstance(func, ast.Attribute) and func.attr == "setdefault"
    if not (is_env or is_setdefault) or not first.value.isupper():
        return None
    if is_setdefault:
        expression = node.args[1] if len(node.args) > 1 else None
    else:
        keyword = next((k for k in node.keywords if k.arg == "default"), None)
        expression = keyword.value if keyword else None
    if expression is None:
        return first.value, REQUIRED
    try:
        return first.value, ast.literal_eval(expression)
    except ValueError:
        pass
    if all(isinstance(n, ast.BinOp | ast.Constant | ast.operator) for n in ast.walk(expression)):
        # Arithmetic on numbers only, e.g. 512 * 1024 * 1024.
        return first.value, eval(compile(ast.Expression(expression), "<default>", "eval"), {})  # noqa: S307
    return first.value, Expression(ast.unparse(expression))


@dataclass
class Documented:
    """One variable of .env.example."""

    name: str
    value: str
    commented: bool
    comment: str
    compose_only: bool


def env_example(path: Path = ROOT / ".env.example") -> dict[str, Documented]:
    """{variable: Documented} of every `NAME=value` or `# NAME=value` line of `path`.

    `comment` is the block of plain comment lines just above the variable
    (or above the run of variables it belongs to).
    """
    documented: dict[str, Documented] = {}
    comment: list[str] = []
    compose_only = False
    previous_was_variable = False
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            compose_only = line.strip() == COMPOSE_ONLY_HEADER
            comment, previous_was_variable = [], False
            continue
        match = _VARIABLE.match(line)
        if match:
            documented[match["name"]] = Documented(
                name=match["name"],
                value=match["value"],
                commented=bool(match["commented"]),
                comment=" ".join(comment),
                compose_only=compose_only,
            )
            previous_was_variable = True
        elif line.startswith("#"):
            if previous_was_variable:
                comment, previous_was_variable = [], False
            comment.append(line.lstrip("# ").strip())
        else:
            comment, previous_was_variable = [], False
    return documented


def as_env_text(value: object) -> str | None:
    """How a literal default is written in an env file, or None when not a plain scalar."""
    if isinstance(value, Expression):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | str):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    return None
