"""Guards on the code base itself: no Celery-native retry delays, no shadowed stdlib `platform`."""

from __future__ import annotations

import ast
import io
import platform
import subprocess
import sys
import sysconfig
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "jobs"

# Celery-native retry delays park the retry as an ETA message inside the worker
# (DESIGN.md "Retries"; STYLE.md "What not to copy").
FORBIDDEN_NAMES = frozenset(
    {
        "countdown",
        "eta",
        "autoretry_for",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "default_retry_delay",
    }
)
SKIPPED_TOKENS = frozenset(
    {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
)


def forbidden_uses(source: str) -> list[str]:
    """Code tokens that schedule a Celery-native retry delay, as "line: what".

    Looks only at code: names, attribute accesses, keyword arguments, string
    literals that are exactly a forbidden name (a `**{"countdown": 5}` key)
    and calls of an attribute `.retry(`. Comments and docstrings may name
    them freely.
    """
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type not in SKIPPED_TOKENS
    ]
    hits = []
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NAME and tok.string in FORBIDDEN_NAMES:
            hits.append(f"{tok.start[0]}: {tok.string}")
        elif tok.type == tokenize.STRING:
            try:
                value = ast.literal_eval(tok.string)
            except (ValueError, SyntaxError):
                continue  # an f-string: not a plain key
            if value in FORBIDDEN_NAMES:
                hits.append(f"{tok.start[0]}: {tok.string}")
        elif (
            tok.type == tokenize.OP
            and tok.string == "."
            and i + 2 < len(tokens)
            and tokens[i + 1].string == "retry"
            and tokens[i + 2].string == "("
        ):
            hits.append(f"{tok.start[0]}: .retry(")
    return hits


def test_guard_scanner_finds_retry_delays_in_code() -> None:
    source = (
        "run.apply_async(args, countdown=5)\n"
        "run.apply_async(args, eta=when)\n"
        "self.retry(exc=exc)\n"
        "options = {'countdown': 3}\n"
        "@shared_task(autoretry_for=(Exception,), retry_backoff=True)\n"
        "def f(): pass\n"
        "delay = request.eta\n"
    )

    assert len(forbidden_uses(source)) == 7


def test_guard_scanner_ignores_prose_and_lookalikes() -> None:
    source = (
        '"""Never `Task.retry()`, never a countdown or ETA: eta, countdown, .retry(."""\n'
        "# no countdown=, no eta=, no self.retry( here\n"
        "delay = policy.retry_delay(1)\n"
        "run.apply_async(args, retry=False)\n"
        "meta = beta = countdowns = 1\n"
        "message = f'eta {meta}'\n"
        "text = 'the countdown begins'\n"
    )

    assert forbidden_uses(source) == []


def test_guard_jobs_code_never_uses_countdown_eta_or_task_retry() -> None:
    files = sorted(JOBS.rglob("*.py"))
    assert files, "no Python files under jobs/"

    hits = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in files
        for hit in forbidden_uses(path.read_text(encoding="utf-8"))
    ]

    assert hits == [], "Celery-native retry delays in jobs/: " + ", ".join(hits)


def _stdlib_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"]).resolve()


def test_guard_platform_module_is_the_stdlib_one() -> None:

    path = Path(platform.__file__).resolve()

    assert path.parent == _stdlib_dir()
    assert path.is_relative_to(Path(sys.base_prefix).resolve())
    assert platform.python_implementation()


def test_guard_platform_module_is_stdlib_when_run_from_the_repo_root() -> None:
    # `python -c` and `python manage.py` put the repo root first on sys.path,
    # where the deployment folder `platform/` lives; uuid imports platform.
    code = "import uuid, platform; uuid.uuid4(); print(platform.__file__)"

    output = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()

    assert Path(output).resolve().parent == _stdlib_dir()


def test_guard_platform_dir_holds_no_python() -> None:
    platform_dir = ROOT / "platform"
    assert platform_dir.is_dir()

    assert not (platform_dir / "__init__.py").exists()
    assert sorted(platform_dir.rglob("*.py")) == []


@pytest.mark.parametrize("path", ["platform", "tests/platform", "tests/unit/platform"])
def test_guard_no_importable_package_named_platform(path: str) -> None:
    assert not (ROOT / path / "__init__.py").exists()
    if path.startswith("tests"):
        assert not (ROOT / path).exists()


def test_guard_pytest_uses_importlib_import_mode() -> None:

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

    assert "--import-mode=importlib" in config["tool"]["pytest"]["ini_options"]["addopts"]
