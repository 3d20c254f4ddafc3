"""Issue 18 item 2 through a real worker: a CSV path swapped after submit is never followed out of its root.

Jobs are submitted while their `source` does not exist yet (or is a plain
file), then the path is swapped (a symbolic link to /proc/self/environ or
/etc/passwd, a directory, a FIFO, a symlinked parent directory, a link that
climbs out with `..`) before any worker runs. Before jobs.kinds.localfiles
the worker followed the link: the job's result held /etc/passwd's first line
or the worker's environment. Now each such job is dead after one attempt with
an error naming the path, and nothing read from the target anywhere in it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import Platform, PlatformFactory, require_postgres

pytestmark = pytest.mark.integration

# Text of the targets that must never show in a job.
SECRET_MARKERS = ("root:x:0:0", "DATABASE_URL", "DJANGO_SECRET_KEY", "outside-secret")


def _link(target: str) -> Callable[[Path], None]:
    return lambda path: path.symlink_to(target)


def _replace_by_link(path: Path) -> None:
    path.unlink()
    path.symlink_to("/etc/passwd")


# case -> (source below the root, what happens to it after submit)
SWAPS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "environ": ("environ.csv", _link("/proc/self/environ")),
    "passwd": ("passwd.csv", _link("/etc/passwd")),
    "directory": ("dir.csv", lambda path: path.mkdir()),
    "fifo": ("fifo.csv", lambda path: os.mkfifo(path)),
    "parent-link": ("etc/passwd", lambda path: path.parent.symlink_to("/etc")),
    "dotdot-link": ("up/outside.csv", lambda path: path.parent.symlink_to("..")),
    "file-then-link": ("real.csv", _replace_by_link),
}


@pytest.fixture(scope="module")
def raced(_logroot: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every case submitted, swapped, then run by a worker started afterwards: {case: job}."""
    require_postgres()
    base = tmp_path_factory.mktemp("csv-race")
    root = base / "root"
    root.mkdir()
    (base / "outside.csv").write_text("outside-secret\n1\n")
    (root / "real.csv").write_text("a\n1\n")
    factory = PlatformFactory(logroot=_logroot)
    try:
        platform = factory("csv_race", env={"JOBS_CSV_ROOTS": str(root)}, worker=False)
        # given jobs accepted while their paths were harmless
        ids = {
            case: platform.submit("report.csv_summary", {"source": str(root / relative)})
            for case, (relative, _swap) in SWAPS.items()
        }
        ids["created-later"] = platform.submit(
            "report.csv_summary", {"source": str(root / "later.csv")}
        )
        # when the paths change before any attempt runs
        for relative, swap in SWAPS.values():
            swap(root / relative)
        (root / "later.csv").write_text("a\n1\n2\n")
        platform.worker = platform.stack.start_worker(concurrency=2, timeout=120)
        jobs = {case: platform.wait_job(job_id, timeout=90) for case, job_id in ids.items()}
        yield {"platform": platform, "root": root, "jobs": jobs}
    finally:
        factory.close()


@pytest.mark.parametrize("case", list(SWAPS))
def test_swapped_path_is_refused_for_good_naming_the_path(raced: dict[str, Any], case: str) -> None:
    job = raced["jobs"][case]
    platform: Platform = raced["platform"]

    # then the attempt failed permanently, saying which path, reading nothing
    assert job["status"] == "dead", job
    assert job["attempts_made"] == 1, job
    assert job["result"] is None
    assert str(raced["root"] / SWAPS[case][0]) in job["last_error"], job["last_error"]
    errors = platform.rows(
        "SELECT error_message, traceback FROM jobs_attempt WHERE job_id = %s", (job["id"],)
    )
    text = json.dumps(job) + json.dumps(errors)
    assert not [marker for marker in SECRET_MARKERS if marker in text], text


def test_file_created_after_submit_is_read(raced: dict[str, Any]) -> None:
    job = raced["jobs"]["created-later"]

    assert job["status"] == "succeeded", job
    assert job["result"]["rows"] == 2


def test_dotdot_path_is_refused_at_submit(raced: dict[str, Any]) -> None:
    platform: Platform = raced["platform"]

    response = platform.post_job(
        {"kind": "report.csv_summary", "payload": {"source": f"{raced['root']}/../outside.csv"}}
    )

    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["field"] == "payload.source"
