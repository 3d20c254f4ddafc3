"""`python -m bench --profile`: py-spy on one worker child during a PostgreSQL drain.

A platform as P1 runs it; enough `demo.flaky` jobs (every attempt failing
and retrying with `--profile-storm`) are queued for the sampling window;
the worker starts and py-spy samples its first child for
`--profile-seconds` at 200 Hz (`--nonblocking`: the child is not paused).
The summary: the functions in most samples (inclusive: anywhere on the
stack; self: the leaf), as shares of the child's busy samples (py-spy
skips idle ones), and the samples charged to the platform's own code: each
to the innermost `jobs`/`observability`/`config` frame on its stack (so
`record_first` holds the Redis round trip it makes; a stack without one
is Celery's, billiard's or a library's, named by its leaf). The raw stacks stay in the log directory for a flame
graph (flamegraph.pl or speedscope read them).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.p1_drain import STORM_ENV
from bench.processes import children
from bench.rig import Options, Rig
from devstack.services import wait_for

TOP = 20
PLATFORM = frozenset({"jobs", "observability", "config"})
LOOP = "Worker.workloop (billiard/pool.py)"


def summarize(raw: Path, top: int = TOP) -> str:
    """Markdown summary of py-spy's raw output (`stack;stack;leaf count` per line)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    charged: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_name(frame) for frame in stack.split(";")]
        # Below the pool's loop: the fork and bootstrap frames above it are on every stack.
        loops = [i for i, name in enumerate(frames) if name.startswith(LOOP)]
        if loops:
            frames = frames[loops[-1] + 1 :] or frames[-1:]
        for name in set(frames):
            inclusive[name] += count
        for package in {_package(name) for name in frames}:
            packages[package] += count
        own[frames[-1]] += count
        ours = [name for name in frames if _package(name) in PLATFORM]
        charged[ours[-1] if ours else f"(not ours) {frames[-1]}"] += count
    if not total:
        return "py-spy recorded no samples (was the child busy?)"
    shares = ", ".join(f"{p} {100 * n / total:.0f}%" for p, n in packages.most_common(12))
    lines = [f"{total} samples. By package (on the stack): {shares}.", ""]
    lines += ["Functions, inclusive (on the stack, below the pool's loop) and self (the leaf):", ""]
    lines += ["| inclusive | function | | self | function |", "|---:|---|---|---:|---|"]
    for (name_i, n_i), (name_s, n_s) in zip(
        inclusive.most_common(top), own.most_common(top), strict=False
    ):
        lines.append(
            f"| {100 * n_i / total:.1f}% | `{name_i}` | | {100 * n_s / total:.1f}% | `{name_s}` |"
        )
    lines += ["", "Charged to the innermost platform frame on the stack:", ""]
    lines += [
        "| share | platform function (or the leaf, when none is on the stack) |",
        "|---:|---|",
    ]
    for name, n in charged.most_common(top):
        lines.append(f"| {100 * n / total:.1f}% | `{name}` |")
    return "\n".join(lines)


def _package(name: str) -> str:
    where = name.rpartition(" (")[2].rstrip(")")
    head = where.split("/", 1)[0]
    return head.removesuffix(".py") or "?"


def _name(frame: str) -> str:
    # "attempt_start (jobs/services/attempt_start.py:120)" -> "attempt_start (jobs/services/attempt_start.py)"
    func, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    for marker in ("site-packages/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{func} ({path})" if path else func


def run(opts: Options, *, seconds: float = 20.0, storm: bool = False) -> str:
    """Profile a worker child; returns the markdown summary (also printed)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        raise RuntimeError("py-spy is not installed (it is in the dev extras: make install)")
    rig = Rig(opts, "profile", env=STORM_ENV)
    rig.start_web()
    jobs = int(seconds * (60 if storm else 250))
    rig.submit(jobs, {"kind": "demo.flaky", "payload": {"fail_times": 100 if storm else 0}})
    if storm:
        rig.stack.start_scheduler()
    worker = rig.stack.start_worker(concurrency=2, timeout=120)
    child = wait_for(lambda: children(worker.pid), timeout=30, what="worker children")[0]
    raw = rig.logdir / f"py-spy-child-{child}.txt"
    before = rig.finished_attempts()
    proc = subprocess.run(
        [spy, "record", "--pid", str(child), "--duration", str(int(seconds)), "--rate", "200"]
        + ["--nonblocking", "--format", "raw", "--output", str(raw)],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    if proc.returncode != 0 or not raw.exists():
        raise RuntimeError(f"py-spy failed ({proc.returncode}): {proc.stderr[-2000:]}")
    done = rig.finished_attempts() - before
    what = "failing and retrying" if storm else "no-op"
    summary = (
        f"**Profile** (py-spy, worker child {child}, {seconds:.0f} s of a PostgreSQL drain of "
        f"{what} `demo.flaky` jobs; {done} attempts finished meanwhile by both children, "
        f"{done / seconds:.0f}/s; raw stacks in {raw}):\n\n" + summarize(raw)
    )
    print("\n" + summary, flush=True)
    rig.close()
    return summary
