"""Debian binaries for the operations tests: installed as root, else the test is skipped.

CI runs as root on a clean clone, so there a missing `promtool`, `amtool`,
`docker-compose`, `prometheus` or `chromium` is installed with apt-get
(devstack.debian) and a failed install fails the test. A developer who is
not root gets a skip that names the package to install.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from devstack.debian import PACKAGES, MissingBinary, ensure_binary

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = ROOT / "platform"
RULES = PLATFORM / "prometheus" / "alerts.yml"
RULE_TESTS = PLATFORM / "prometheus" / "alerts_test.yml"


def require_binary(name: str) -> str:
    """Path of Debian binary `name`; skips the test when it is missing and we are not root."""
    try:
        return ensure_binary(name)
    except MissingBinary as exc:
        if os.geteuid() == 0:
            pytest.fail(f"{exc}", pytrace=False)
        pytest.skip(f"needs {name} (apt-get install -y {PACKAGES[name]}): {exc}")


def run(argv: list[str], *, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a tool; returns the completed process (stdout+stderr in .stdout), never raises on exit code."""
    return subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def alert_rules(path: Path = RULES) -> list[dict]:
    """Every `alert:` rule of a Prometheus rule file, with its group name under "group"."""
    return [
        {**rule, "group": group["name"]}
        for group in load_yaml(path)["groups"]
        for rule in group["rules"]
        if "alert" in rule
    ]
