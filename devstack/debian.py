"""Debian's binaries the operations tooling runs: found on PATH, else installed with apt-get.

`make observe` and the tests run the real `prometheus`, `promtool`,
`prometheus-alertmanager`, `amtool`, `docker-compose`, `chromium` and `nginx`
from Debian's packages (never a downloaded build). As root, a missing one is
installed with `apt-get install -y` (after an `apt-get update` when the
package lists are stale); otherwise `MissingBinary` says what to install.
"""

from __future__ import annotations

import os
import shutil
import subprocess

# binary -> Debian package that ships it
PACKAGES: dict[str, str] = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "prometheus-alertmanager": "prometheus-alertmanager",
    "amtool": "prometheus-alertmanager",
    "docker-compose": "docker-compose",
    "chromium": "chromium",
    "nginx": "nginx",
}
APT_TIMEOUT_SECONDS = 900


def _search_path() -> str:
    # Debian puts daemons such as nginx in /usr/sbin, which a user's PATH may lack.
    return os.pathsep.join([os.environ.get("PATH", os.defpath), "/usr/sbin", "/sbin"])


class MissingBinary(RuntimeError):
    """A binary is not on PATH and could not be installed (not root, or apt-get failed)."""


def ensure_binary(name: str) -> str:
    """Absolute path of Debian binary `name`, installing its package when missing.

    Raises KeyError for a binary not in PACKAGES, MissingBinary when it is
    absent and this process is not root or apt-get fails.
    """
    package = PACKAGES[name]
    found = shutil.which(name, path=_search_path())
    if found:
        return found
    if os.geteuid() != 0:
        raise MissingBinary(f"{name} not found: run `sudo apt-get install -y {package}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    # A clean machine may have no package lists yet: update once, then retry.
    for attempt in ([install], [["apt-get", "update", "-q"], install]):
        for argv in attempt:
            result = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_SECONDS
            )
            if result.returncode != 0:
                break
        found = shutil.which(name, path=_search_path())
        if found:
            return found
    raise MissingBinary(
        f"apt-get install {package} did not provide {name}:\n{result.stderr[-2000:]}"
    )
