"""A test's helper process (a relay, a request clock): a script of tests/integration run
with the test's Python and the repository on its path, which prints one line once ready."""

from __future__ import annotations

import os
import select
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


class HelperProcess:
    """`python tests/integration/<script> ARGS...`; `ready` is the first line it printed
    (within `timeout` seconds, else RuntimeError). `close()` kills it by pid. Start it from
    a thread that outlives it: the scripts die with the thread that started them
    (PR_SET_PDEATHSIG)."""

    def __init__(self, script: str, *args: str, timeout: float = 30.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / script), *args],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},  # the script imports devstack
        )
        assert self.process.stdout is not None
        ready = select.select([self.process.stdout], [], [], timeout)[0]
        self.ready = self.process.stdout.readline().strip() if ready else ""
        if not self.ready:
            self.close()
            raise RuntimeError(f"{script} {' '.join(args)} printed nothing in {timeout} s")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
