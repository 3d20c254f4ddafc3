"""`python -m bench.prune_scale` at a small size: the prune empties the old set beside a drain.

The full size (1,000,000 jobs, 3,000,000 attempts) runs by hand; its figures
are in docs/retention.md. Here 20,000 old jobs, one drain of each variant:
the drain figures are too short to judge the 20% bound, so only the
deletions, the batch bound and the page times are asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.harness import require_postgres

ROOT = Path(__file__).resolve().parents[2]
OLD = 20_000


@pytest.mark.integration
@pytest.mark.soak  # on demand (`pytest -m soak`), like the other benchmarks' quick sizes
@pytest.mark.timeout(420)
def test_prune_scale_small_prunes_every_old_job_in_bounded_batches() -> None:
    require_postgres()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.prune_scale", "--jobs", str(OLD), "--recent", "5000"]
        + ["--drain", "200", "--runs", "1", "--repeat", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )
    summary = json.loads(proc.stdout.strip().splitlines()[-1])

    assert summary["jobs_pruned"] == OLD, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert summary["attempts_pruned"] == 3 * OLD
    assert summary["batches"] >= OLD // 500
    assert summary["longest_batch_ms"] < 2000
    assert all(ms < 500 for ms in summary["pages_ms"].values()), summary
