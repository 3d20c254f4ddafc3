"""Dumps on demand (the seeds' pprof): per worker child RSS, thread stacks, top allocations.

`celery -A config inspect jobs_dump [top [deadline]]`, or from Python
`request_dump(app, top=10)` (`app.control.inspect()`), runs in the
worker's main process, but stacks and allocations live in the pool
children. So the main process writes a request file into a per-worker
directory and sends every child DUMP_SIGNAL; the child's handler
(installed in `worker_process_init`) writes its dump as JSON beside it;
the main process collects what arrived before the deadline (seconds). A
child that does not answer in time (just forked, or stuck in C code) is
still reported, with RSS and thread count from the process table and an
`error`. The main process's event loop is blocked while it waits, so the
deadline is short (default 0.75 s, under the CLI's 1 s reply timeout).

A real-time signal's default action is to terminate the process; the
main process ignores DUMP_SIGNAL before the pool forks, so a child
signalled before it installed its handler ignores it instead of dying.

All sizes are bytes.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
from celery.worker.control import inspect_command

from observability.worker_info import pool_pids

logger = logging.getLogger(__name__)

DUMP_SIGNAL = signal.SIGRTMIN + 4  # SIGRTMIN+3 is jobs.supervisor's abort signal
DEFAULT_TOP = 10
MAX_TOP = 100
DEFAULT_DEADLINE_SECONDS = 0.75
MAX_DEADLINE_SECONDS = 10.0
POLL_SECONDS = 0.01
STACK_LIMIT = 64  # innermost frames kept per thread
REQUEST_FILE = "request.json"
DIR_PREFIX = "jobs-dumps-"

# The per-worker directory, set in the main process before the pool forks,
# so every child (recycled ones too) inherits it.
_state: dict[str, Path | None] = {"dir": None}


# --- main process ------------------------------------------------------------


def prepare_parent() -> Path:
    """Create this worker's dump directory and ignore DUMP_SIGNAL; call before the pool forks."""
    directory = _state["dir"]
    if directory is None or not directory.is_dir():
        _remove_orphans()
        directory = Path(tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-"))
        _state["dir"] = directory
    signal.signal(DUMP_SIGNAL, signal.SIG_IGN)
    return directory


def _remove_orphans() -> None:
    """Remove dump directories of workers that died without cleaning up (SIGKILL)."""
    for path in Path(tempfile.gettempdir()).glob(f"{DIR_PREFIX}*-*"):
        pid = path.name.removeprefix(DIR_PREFIX).partition("-")[0]
        try:
            mine = path.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def remove_parent_dir() -> None:
    """Remove the dump directory (worker shutdown)."""
    directory, _state["dir"] = _state["dir"], None
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def collect(*, pids: list[int], top: int, deadline: float) -> list[dict[str, Any]]:
    """Dumps of the children `pids`, waiting at most `deadline` seconds for them to answer.

    Without children (solo or threads pool) this process dumps itself.
    """
    directory = _state["dir"]
    if not pids:
        return [process_dump(top=top)]
    if directory is None or not directory.is_dir():
        return [_from_process_table(pid, error="dump directory not prepared") for pid in pids]
    for stale in [*directory.glob("*.json"), *directory.glob("*.tmp")]:
        stale.unlink(missing_ok=True)
    request_id = uuid.uuid4().hex
    _write_json(directory / REQUEST_FILE, {"id": request_id, "top": top})
    paths = {pid: directory / f"{request_id}-{pid}.json" for pid in pids}
    signalled = []
    for pid in pids:
        try:
            os.kill(pid, DUMP_SIGNAL)
            signalled.append(pid)
        except ProcessLookupError:
            continue
    end = time.monotonic() + deadline
    while time.monotonic() < end and not all(paths[pid].exists() for pid in signalled):
        time.sleep(POLL_SECONDS)
    results = []
    for pid in pids:
        try:
            results.append(json.loads(paths[pid].read_text()))
            paths[pid].unlink(missing_ok=True)
        except (FileNotFoundError, json.JSONDecodeError):
            error = f"no dump within {deadline}s" if pid in signalled else "process gone"
            results.append(_from_process_table(pid, error=error))
    return results


def _from_process_table(pid: int, *, error: str) -> dict[str, Any]:
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            rss, num_threads = process.memory_info().rss, process.num_threads()
    except psutil.Error:
        rss, num_threads = None, None
    return {
        "pid": pid,
        "rss_bytes": rss,
        "num_threads": num_threads,
        "threads": [],
        "tracemalloc": None,
        "error": error,
    }


@inspect_command(
    args=[("top", int), ("deadline", float)],
    signature="[top=10 [deadline=0.75]]",
)
def jobs_dump(
    state: Any, top: int = DEFAULT_TOP, deadline: float = DEFAULT_DEADLINE_SECONDS, **_: Any
) -> dict[str, Any]:
    """Per child: RSS, threads with their stacks, top allocation sites (when tracemalloc is on)."""

    top = max(0, min(int(top), MAX_TOP))
    deadline = max(0.0, min(float(deadline), MAX_DEADLINE_SECONDS))
    worker = state.consumer.controller
    me = psutil.Process()
    return {
        "main": {"pid": me.pid, "rss_bytes": me.memory_info().rss},
        "children": collect(pids=pool_pids(worker), top=top, deadline=deadline),
    }


def request_dump(
    app: Any,
    *,
    destination: list[str] | None = None,
    top: int = DEFAULT_TOP,
    deadline: float = DEFAULT_DEADLINE_SECONDS,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """{node name: jobs_dump reply} from the workers in `destination` (default: all).

    The Python side of `celery inspect jobs_dump`; waits `timeout` seconds for
    replies (returns early once every named destination answered).
    """
    inspect = app.control.inspect(timeout=timeout, destination=destination)
    return inspect._request("jobs_dump", top=top, deadline=deadline) or {}


# --- children ----------------------------------------------------------------


def install_child(*, tracemalloc_frames: int) -> None:
    """In a pool child after fork: start tracemalloc when `tracemalloc_frames` > 0, handle DUMP_SIGNAL."""
    if tracemalloc_frames > 0 and not tracemalloc.is_tracing():
        tracemalloc.start(tracemalloc_frames)
    try:
        signal.signal(DUMP_SIGNAL, _on_dump_signal)
    except ValueError:  # not the main thread (threads pool): dumps come from the main process
        logger.warning("jobs_dump: no signal handler in pid %s (not the main thread)", os.getpid())


def _on_dump_signal(signum: int, frame: FrameType | None) -> None:
    directory = _state["dir"]
    if directory is None:
        return
    try:
        request = json.loads((directory / REQUEST_FILE).read_text())
        dump = process_dump(top=int(request["top"]), interrupted=frame)
        _write_json(directory / f"{request['id']}-{os.getpid()}.json", dump)
    except Exception:
        logger.exception("jobs_dump: pid %s could not write its dump", os.getpid())


def process_dump(*, top: int, interrupted: FrameType | None = None) -> dict[str, Any]:
    """This process: RSS, OS thread count, Python threads with stacks, top allocations.

    `interrupted` is the frame a signal handler interrupted; it replaces the
    handler's own frames in the current thread's stack.
    """
    allocations = top_allocations(top=top)  # first, before the dump allocates anything
    me = psutil.Process()
    with me.oneshot():
        rss, num_threads = me.memory_info().rss, me.num_threads()
    return {
        "pid": me.pid,
        "rss_bytes": rss,
        "num_threads": num_threads,
        "threads": thread_stacks(interrupted=interrupted),
        "tracemalloc": allocations,
        "error": None,
    }


def thread_stacks(*, interrupted: FrameType | None = None) -> list[dict[str, Any]]:
    """Every Python thread with its stack (see `_stack`), the main thread first."""
    frames = sys._current_frames()
    if interrupted is not None:
        frames[threading.get_ident()] = interrupted
    known = {thread.ident: thread for thread in threading.enumerate()}
    # The main thread's object may keep the parent's native id after a fork.
    native_ids = {threading.get_ident(): threading.get_native_id()}
    stacks = []
    for ident, frame in frames.items():
        thread = known.get(ident)
        stacks.append(
            {
                "name": thread.name if thread else f"<unregistered {ident}>",
                "ident": ident,
                "native_id": native_ids.get(ident, thread.native_id if thread else None),
                "daemon": thread.daemon if thread else None,
                "stack": _stack(frame),
            }
        )
    stacks.sort(key=lambda t: (t["name"] != "MainThread", t["name"]))
    return stacks


def _stack(frame: FrameType | None) -> list[str]:
    """ "file:line in function", outermost first, at most STACK_LIMIT innermost frames.

    No source text: reading it would fill linecache, and the dump would show
    up among the child's own top allocations.
    """
    lines = []
    while frame is not None and len(lines) < STACK_LIMIT:
        lines.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    return lines[::-1]


def top_allocations(*, top: int) -> dict[str, Any]:
    """The `top` allocation sites by live size, when tracemalloc is tracing; else {"enabled": False}."""
    if not tracemalloc.is_tracing():
        return {"enabled": False}
    frames = tracemalloc.get_traceback_limit()
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, __file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
            tracemalloc.Filter(False, "<unknown>"),
        )
    )
    traced, peak = tracemalloc.get_traced_memory()
    sites = []
    for stat in snapshot.statistics("traceback" if frames > 1 else "lineno")[:top]:
        site = stat.traceback[-1]  # frames run oldest to newest: the allocation is last
        entry: dict[str, Any] = {
            "site": f"{site.filename}:{site.lineno}",
            "size_bytes": stat.size,
            "count": stat.count,
        }
        if frames > 1:
            entry["traceback"] = [f"{f.filename}:{f.lineno}" for f in stat.traceback]
        sites.append(entry)
    return {
        "enabled": True,
        "frames": frames,
        "traced_bytes": traced,
        "peak_bytes": peak,
        "top": sites,
    }


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically (a reader never sees half a file)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)
