"""Lifecycle of prometheus-client's multiprocess directory.

Each process writes its own mmap files (`counter_<pid>.db`,
`gauge_liveall_<pid>.db`, ...). Left alone, every recycled child adds files
and scrapes slow down from milliseconds to tens of seconds
(prometheus/client_python issues 204 and 367). So:

- `wipe()` empties the directory before the pool forks (celeryd_init,
  gunicorn on_starting);
- `compact()` runs before each collection, under a file lock: for every pid
  that is gone (however it died, SIGKILL included) its live gauges are
  dropped (`mark_process_dead`) and its counter and histogram values are
  added into `<type>_archive.db`, then its file is removed. Totals never go
  backwards and the file count stays bounded by the live processes.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psutil
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.mmap_dict import MmapedDict

from config.env import metrics_root

logger = logging.getLogger(__name__)

_FILE = re.compile(r"^(?P<type>[a-z]+)_(?:(?P<mode>[a-z]+)_)?(?P<pid>\d+)\.db$")
ARCHIVED_TYPES = ("counter", "histogram", "summary")
# MmapedDict's header: 4 bytes "used", 4 bytes padding.
_HEADER_BYTES = 8


_active_dir: Path | None = None


def activate(directory: Path, *, wipe_first: bool = False) -> Path:
    """Switch this process (and the children it forks) to multiprocess metrics in `directory`.

    Call before the first `.labels()` of any metric: every catalogue metric
    has labels, and prometheus-client creates a labelled child's value with
    the value class current at that moment. `wipe_first` empties the
    directory (keeping this process's files): do it once, before forking.
    """
    from prometheus_client import values  # noqa: PLC0415 - the value class current at activation, after the environment is set

    global _active_dir
    directory.mkdir(parents=True, exist_ok=True)
    if wipe_first:
        wipe(directory, keep_pid=os.getpid())
    # prometheus-client reads the directory from the environment when a value is created.
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    values.ValueClass = values.MultiProcessValue()
    _active_dir = directory
    return directory


def multiproc_dir() -> Path | None:
    """The directory this process writes metrics to, or None (single-process mode)."""
    return _active_dir


def role_dir(role: str) -> Path:
    """Directory for `role` ("web", "scheduler", or "worker-<node>") under JOBS_METRICS_DIR."""

    safe = re.sub(r"[^A-Za-z0-9_.@-]", "_", role)
    return metrics_root() / safe


def wipe(directory: Path, *, keep_pid: int | None = None) -> int:
    """Create `directory` if needed and delete its metric files (except `keep_pid`'s). Returns files removed."""
    directory.mkdir(parents=True, exist_ok=True)
    removed = 0
    for path in directory.glob("*.db"):
        match = _FILE.match(path.name)
        if keep_pid is not None and match and int(match["pid"]) == keep_pid:
            continue
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Exclusive lock shared by every process that compacts or collects `directory`."""
    with open(directory / ".lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _has_values(path: Path) -> bool:
    """Whether `path` can be read: prometheus-client creates a process's file empty and
    only then sizes it, and reading it in between (or ever, if the process died
    there) fails with struct.error. An empty file holds no values."""
    try:
        return path.stat().st_size >= _HEADER_BYTES
    except FileNotFoundError:
        return False


def _fold(source: Path, archive: Path) -> None:
    if not _has_values(source):
        return
    values = list(MmapedDict.read_all_values_from_file(str(source)))
    if not values:
        return
    target = MmapedDict(str(archive))
    try:
        for key, value, timestamp, _ in values:
            current, _ = target.read_value(key)
            target.write_value(key, current + value, timestamp)
    finally:
        target.close()


def compact(
    directory: Path, *, dead: set[int] | None = None, only: set[int] | None = None
) -> list[int]:
    """Fold the files of dead processes into the archive; returns the pids handled.

    `dead` forces pids to be treated as dead (the caller knows better); by
    default a pid is dead when no such process exists or it is a zombie.
    `only` limits the work to those pids. Call with `locked(directory)` held.
    """
    by_pid: dict[int, list[tuple[str, Path]]] = {}
    for path in directory.glob("*.db"):
        match = _FILE.match(path.name)
        if match:
            by_pid.setdefault(int(match["pid"]), []).append((match["type"], path))
    handled = []
    for pid, files in by_pid.items():
        if only is not None and pid not in only:
            continue
        if pid == os.getpid() or ((dead is None or pid not in dead) and _alive(pid)):
            continue
        multiprocess.mark_process_dead(pid, str(directory))
        for kind, path in files:
            if not path.exists():
                continue
            if kind in ARCHIVED_TYPES:
                _fold(path, directory / f"{kind}_archive.db")
            path.unlink(missing_ok=True)
        handled.append(pid)
    if handled:
        logger.debug("metrics: folded files of %s dead processes", len(handled))
    return handled


def file_pids(directory: Path) -> set[int]:
    """Pids that have metric files in `directory`."""
    return {
        int(match["pid"]) for path in directory.glob("*.db") if (match := _FILE.match(path.name))
    }


def counter_totals(directory: Path, family: str, label: str) -> dict[str, int]:
    """{value of `label`: total} of counter `family` over every process's file in `directory`.

    Reads only the counter files and parses only that family's entries (a
    full collection merges every series, histograms included: ~300x the
    work), under the directory's lock, so a file folded meanwhile by
    another reader is counted once. Folds nothing (`compact` does).
    """
    quoted = json.dumps(family)
    totals: dict[str, int] = {}
    with locked(directory):
        for path in directory.glob("counter_*.db"):
            if not _has_values(path):
                continue
            for key, value, _timestamp, _pos in MmapedDict.read_all_values_from_file(str(path)):
                if quoted not in key:
                    continue
                # prometheus-client's key (mmap_dict.mmap_key): [family, sample,
                # labels, help]; tests/unit/test_multiproc_counters.py fails if it changes.
                metric, _sample, labels, _help = json.loads(key)
                if metric != family:
                    continue
                name = labels.get(label, "unknown")
                totals[name] = totals.get(name, 0) + int(value)
    return totals


class CompactingMultiProcessCollector(multiprocess.MultiProcessCollector):
    """MultiProcessCollector over one or more directories that folds dead processes' files first.

    Each directory is compacted under its own lock; the files of all of them
    are merged into one set of families (so a metric written by both the web
    and the scheduler appears once, summed).
    """

    def __init__(
        self, registry: CollectorRegistry | None, path: Path, *, extra: list[Path] | None = None
    ) -> None:
        self._directories = [Path(path), *(Path(p) for p in extra or [])]
        super().__init__(registry, str(path))

    def collect(self):  # type: ignore[override]
        # Hold every lock through the merge: another process folding a file
        # between our glob and our read would make a counter jump or vanish.
        with ExitStack() as stack:
            files: list[str] = []
            for directory in self._directories:
                stack.enter_context(locked(directory))
                compact(directory)
                files.extend(str(p) for p in directory.glob("*.db") if _has_values(p))
            return self.merge(files, accumulate=True)
