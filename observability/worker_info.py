"""Worker memory read by the main process: its children (process table), what each owns, rows for Flower.

Generic: a Celery worker and this platform's metric files; the bootstep
that puts these in `celery inspect stats` is jobs.telemetry.worker_info.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psutil
from prometheus_client.mmap_dict import MmapedDict

from observability import multiproc


def pool_pids(worker: Any) -> list[int]:
    """Pids of the worker's pool children; [] for a pool without any (solo, threads)."""
    try:
        info = worker.pool.info or {}
    except Exception:  # pool not started yet, or already stopped
        return []
    return [int(pid) for pid in info.get("processes") or [] if pid]


OWNED_FAMILY = "jobs_worker_child_owned_bytes"


def owned_by_pid() -> dict[int, int]:
    """{pid: bytes the child owns} from the children's own gauge files (jobs_worker_child_owned_bytes).

    Each child writes what it owns (RSS grown since fork) at start and
    after each attempt to its `gauge_liveall_<pid>.db` in this worker's
    multiprocess directory; only it knows its size at fork. {} when the
    worker keeps no directory.
    """
    directory = multiproc.multiproc_dir()
    if directory is None:
        return {}
    owned: dict[int, int] = {}
    for path in directory.glob("gauge_liveall_*.db"):
        match = re.fullmatch(r"gauge_liveall_(\d+)\.db", path.name)
        if not match:
            continue
        try:
            values = MmapedDict.read_all_values_from_file(str(path))
        except (OSError, ValueError):
            continue  # a child's file half written or just removed
        for key, value, _timestamp, _pos in values:
            if json.loads(key)[0] == OWNED_FAMILY:
                owned[int(match.group(1))] = int(value)
    return owned


def children_memory(worker: Any) -> list[dict[str, Any]]:
    """[{pid, rss_bytes, owned_bytes, threads}] of the worker's live pool children (process table).

    `owned_bytes` is what the per-child limit judges; None before the child reported it.
    """
    children = []
    owned = owned_by_pid()
    for pid in pool_pids(worker):
        try:
            child = psutil.Process(pid)
            with child.oneshot():
                if child.status() == psutil.STATUS_ZOMBIE:
                    continue
                children.append(
                    {
                        "pid": pid,
                        "rss_bytes": child.memory_info().rss,
                        "owned_bytes": owned.get(pid),
                        "threads": child.num_threads(),
                    }
                )
        except psutil.Error:
            continue
    return children


MIB = 1024 * 1024


def _mib(value: int) -> str:
    return f"{value / MIB:.1f} MiB"


def readable(block: dict[str, Any]) -> dict[str, Any]:
    """The rows Flower shows for a memory_block(): sizes in MiB, one string per row."""
    children = "; ".join(
        f"pid {c['pid']}: {_mib(c['rss_bytes'])} RSS, "
        + (f"{_mib(c['owned_bytes'])} owned, " if c.get("owned_bytes") is not None else "")
        + f"{c['threads']} threads"
        for c in block["children"]
    )
    memory_limit = block["max_memory_per_child_bytes"]
    task_limit = block["max_tasks_per_child"]
    return {
        "memory_children": children or "none",
        "memory_main_process": f"{_mib(block['main_rss_bytes'])} RSS",
        "memory_limit_per_child": (
            f"{_mib(memory_limit) if memory_limit else 'no memory limit'}, "
            f"{f'{task_limit} tasks' if task_limit else 'no task limit'}"
        ),
        "pending_retries": block["pending_retries"],
    }
