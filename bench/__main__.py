"""`make bench` = `python -m bench`: the platform against its baselines, interleaved, in one run.

    .venv/bin/python -m bench                     # everything, full sizes (≤ 25 min on 2 cores)
    .venv/bin/python -m bench p1 p2 --runs 3      # a selection
    .venv/bin/python -m bench --quick --no-record # the smoke test's sizes
    .venv/bin/python -m bench --profile           # py-spy on a worker child during a drain

Benchmarks: p1 (drain, PostgreSQL and SQLite), storm (every attempt fails
and retries), p2 (enqueue), p3 (pending retries), p4 (/metrics after
recycles), p5 (web p99 beside CPU-heavy jobs), memory (idle RSS). The
baselines: stock Celery without Django (bench/stock_app.py) and the anchor,
an ordinary Django project with stock Celery and django-celery-results
(bench/anchor). Each prints its runs as they finish; at the end a table
(median, min, max, ratio to its baseline) and the targets of issues 12
and 20 as PASS/MISS with the ratio. Unless --no-record, the figures, the command, versions, date and
load average are appended to docs/benchmarks.md.

Needs PostgreSQL (127.0.0.1:5432, user postgres, trust auth, or the
embedded pgserver) and starts its own redis-server. Exit code 0 when the
benchmarks ran (whatever the verdicts), 1 when one failed to run, 2 on a
bad command line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from bench.figures import Report  # noqa: E402
from bench.rig import Options  # noqa: E402
from devstack.postgres import POSTGRES_DEFAULT_URL, ensure_postgres  # noqa: E402
from devstack.services import RedisServer  # noqa: E402

ALL = ("p1", "storm", "p2", "p3", "p4", "p5", "memory")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "benchmarks", nargs="*", metavar="BENCH", help=f"any of {', '.join(ALL)} (default: all)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: proves it runs, not the targets"
    )
    parser.add_argument(
        "--db",
        choices=("postgres", "sqlite", "both"),
        default="both",
        help="P1's databases (others use PostgreSQL)",
    )
    parser.add_argument("--runs", type=int, help="runs of each variant (default 3; quick 1)")
    parser.add_argument("--jobs", type=int, help="P1 jobs per run (default 4000; quick 20)")
    parser.add_argument("--pending", type=int, help="P3 pending retries (default 20000; quick 200)")
    parser.add_argument("--requests", type=int, help="P2 requests per run (default 3000; quick 60)")
    parser.add_argument(
        "--recycles", type=int, help="P4 worker child recycles (default 1000; quick 10)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy a worker child during a PostgreSQL drain; print the top functions",
    )
    parser.add_argument(
        "--profile-storm",
        action="store_true",
        help="profile jobs that fail every attempt and retry",
    )
    parser.add_argument(
        "--profile-seconds", type=float, default=20.0, help="how long to sample (default 20)"
    )
    parser.add_argument(
        "--no-record", action="store_true", help="do not append to docs/benchmarks.md"
    )
    args = parser.parse_args(argv)
    args.profile = args.profile or args.profile_storm
    unknown = [b for b in args.benchmarks if b not in ALL]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(ALL)}")
    for name in ("runs", "jobs", "pending", "requests", "recycles"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1, not {value}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    chosen = args.benchmarks or ([] if args.profile else list(ALL))
    quick = args.quick
    started = time.monotonic()
    load_before = os.getloadavg()
    try:
        admin_url = ensure_postgres(POSTGRES_DEFAULT_URL)
    except RuntimeError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    logroot = Path(tempfile.mkdtemp(prefix="jobs-bench-"))
    redis_server = RedisServer().start()
    opts = Options(
        quick=quick,
        runs=args.runs or (1 if quick else 3),
        jobs=args.jobs or (20 if quick else 4000),
        dbs=["postgres", "sqlite"] if args.db == "both" else [args.db],
        admin_url=admin_url,
        logroot=logroot,
        redis=redis_server,
        pending=args.pending or (200 if quick else 20_000),
        recycles=args.recycles or (10 if quick else 1000),
        web_recycles=2 if quick else 100,
        requests=args.requests or (60 if quick else 3000),
        settle=0.6 if quick else 2.0,
    )
    report = Report()
    failed: list[str] = []
    print(f"bench: {', '.join(chosen) or 'profile only'}; logs in {logroot}", flush=True)
    try:
        for name in chosen:
            if name == "storm" and "p1" in chosen:
                continue  # measured inside p1's interleaving
            began = time.monotonic()
            try:
                run_one(name, opts, report, with_storm="storm" in chosen)
                print(f"bench: {name} took {(time.monotonic() - began) / 60:.1f} min", flush=True)
            except Exception:
                failed.append(name)
                print(
                    f"bench: {name} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True
                )
            finally:
                close_rigs(opts)
        if args.profile:
            from bench import profiling  # noqa: PLC0415 - import cost: only with --profile

            try:
                report.notes.append(
                    profiling.run(opts, seconds=args.profile_seconds, storm=args.profile_storm)
                )
            except Exception:
                failed.append("profile")
                print(f"bench: profile failed:\n{traceback.format_exc()}", file=sys.stderr)
    finally:
        close_rigs(opts)
        redis_server.stop()
    report.notes = opts.notes + report.notes
    wall = time.monotonic() - started
    text = record.render(
        report,
        command="python -m bench " + " ".join(sys.argv[1:] if argv is None else argv),
        wall=wall,
        load_before=load_before,
        load_after=os.getloadavg(),
        failed=failed,
    )
    print("\n" + text, flush=True)
    if not args.no_record and not quick and report.rows:
        record.append(text)
        print(f"appended to {record.DOC}")
    if not failed and not args.profile:
        shutil.rmtree(logroot, ignore_errors=True)
    return 1 if failed else 0


def close_rigs(opts: Options) -> None:
    """Close every platform a benchmark left running (newest first)."""
    for rig in reversed(list(opts.rigs)):
        rig.close()


def run_one(name: str, opts: Options, report: Report, *, with_storm: bool) -> None:
    """Run benchmark `name`; its rows and verdicts go to `report`."""

    if name in ("p1", "storm"):
        from bench import p1_drain  # noqa: PLC0415 - import cost: only the benchmarks asked for

        p1_drain.run(opts, report, storm=name == "storm" or with_storm, success=name == "p1")
        return
    module = {
        "p2": "bench.p2_enqueue",
        "p3": "bench.p3_retries",
        "p4": "bench.p4_scrape",
        "p5": "bench.p5_isolation",
        "memory": "bench.memory",
    }[name]
    importlib.import_module(module).run(opts, report)


if __name__ == "__main__":
    raise SystemExit(main())
