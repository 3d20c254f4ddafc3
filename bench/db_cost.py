"""What each role costs the database: statements and PostgreSQL CPU per job (docs/scaling.md).

Needs a PostgreSQL started with `shared_preload_libraries = 'pg_stat_statements'`
and the extension created in its `postgres` database (the shared server at
:5432 has neither; docs/scaling.md shows how the figures were taken on a
private one), on this host (its processes' CPU is read from /proc):

    python -m bench.db_cost --admin-url postgresql://postgres@127.0.0.1:55432/postgres

Phases, each with pg_stat_statements reset and the server's CPU read before
and after: `submit` (the web alone takes N no-op jobs over the API), `drain`
(a worker as shipped, prefork 2, runs them; no scheduler), `scheduler`
(the scheduler alone on an idle platform for --idle seconds), `retry` (N/2
jobs that fail once and are retried at once, with web, worker and scheduler
all running; per attempt). CPU is
utime + stime of the postmaster, of every live child and of the children it
reaped (cutime + cstime), so backends that came and went and the background
writer, checkpointer, WAL writer and autovacuum are all counted. Statements
include BEGIN/COMMIT (pg_stat_statements.track_utility); this script's own
polls are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from bench.rig import Rig, standalone
from devstack.services import wait_for

POLL = "/* db_cost poll */"
TICKS = os.sysconf("SC_CLK_TCK")
# Retries due at once, and no retry budget in the way: every failure is retried.
NO_BACKOFF = {
    "demo.flaky": {"backoff_base": 0, "backoff_floor": 0, "backoff_cap": 0, "max_attempts": 3}
}


def _cpu_seconds(postmaster: int) -> float:
    """CPU seconds of the PostgreSQL server whose postmaster is `postmaster` (see module doc)."""
    total = 0.0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(name), int(fields[1])
        if pid == postmaster:
            total += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
        elif ppid == postmaster:
            total += int(fields[11]) + int(fields[12])
    return total / TICKS


@dataclass
class Phase:
    name: str
    units: int
    seconds: float
    cpu_seconds: float
    statements: int
    exec_ms: float
    wal_bytes: int
    top: list[dict[str, Any]]

    def row(self) -> dict[str, Any]:
        per = max(self.units, 1)
        return {
            "phase": self.name,
            "units": self.units,
            "seconds": round(self.seconds, 2),
            "statements_per_unit": round(self.statements / per, 2),
            "db_cpu_ms_per_unit": round(1000 * self.cpu_seconds / per, 3),
            "exec_ms_per_unit": round(self.exec_ms / per, 3),
            "wal_bytes_per_unit": round(self.wal_bytes / per),
            "top": self.top,
        }


class Meter:
    """pg_stat_statements and the server's CPU over one phase."""

    def __init__(self, admin_url: str) -> None:
        self.conn = psycopg.connect(admin_url, autocommit=True)
        data_dir = self.conn.execute("SHOW data_directory").fetchone()[0]  # type: ignore[index]
        self.postmaster = int(Path(data_dir, "postmaster.pid").read_text().split()[0])

    def start(self) -> tuple[float, float, str]:
        self.conn.execute("SELECT pg_stat_statements_reset()")
        lsn = self.conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0]  # type: ignore[index]
        return time.perf_counter(), _cpu_seconds(self.postmaster), lsn

    def stop(self, name: str, units: int, started: tuple[float, float, str]) -> Phase:
        at, cpu, lsn = started
        seconds, cpu_used = time.perf_counter() - at, _cpu_seconds(self.postmaster) - cpu
        wal = self.conn.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (lsn,)
        ).fetchone()[0]  # type: ignore[index]
        rows = self.conn.execute(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements "
            "WHERE query NOT LIKE %s AND query NOT LIKE %s AND dbid <> "
            "(SELECT oid FROM pg_database WHERE datname = 'postgres') ORDER BY calls DESC",
            (f"%{POLL}%", "%pg_stat_statements%"),
        ).fetchall()
        top = [
            {"calls": calls, "exec_ms": round(ms, 1), "query": " ".join(query.split())[:140]}
            for query, calls, ms in rows[:15]
        ]
        return Phase(
            name=name,
            units=units,
            seconds=seconds,
            cpu_seconds=cpu_used,
            statements=sum(r[1] for r in rows),
            exec_ms=sum(r[2] for r in rows),
            wal_bytes=int(wal),
            top=top,
        )


def measure(admin_url: str, *, jobs: int, idle: float, retry_only: bool = False) -> list[Phase]:
    meter = Meter(admin_url)
    phases = []
    with standalone("db-cost-") as opts:
        opts.admin_url = admin_url
        if retry_only:
            return [_retries(meter, opts, jobs=jobs // 2)]
        rig = Rig(opts, "dbcost")
        rig.start_web()
        started = meter.start()
        rig.submit(jobs, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
        phases.append(meter.stop("submit (web)", jobs, started))

        def finished() -> int:
            return int(
                rig.scalar(
                    f"{POLL} SELECT count(*) FROM jobs_attempt WHERE finished_at IS NOT NULL"
                )
            )

        started = meter.start()
        rig.stack.start_worker(concurrency=2, timeout=120)
        wait_for(lambda: finished() >= jobs, timeout=1800, interval=1.0, what="drained")
        phases.append(meter.stop("drain (worker)", jobs, started))
        rig.stack.stop()
        rig.stack.start_scheduler()
        started = meter.start()
        time.sleep(idle)  # a fixed window of the scheduler's own passes, nothing to wait for
        phases.append(meter.stop("scheduler idle (per second)", round(idle), started))
        phases.append(_retries(meter, opts, jobs=jobs // 2))
    return phases


def _retries(meter: Meter, opts: Any, *, jobs: int) -> Phase:
    """`jobs` jobs that fail once, retried at once: web, worker and scheduler, per attempt."""
    env = {
        "JOBS_KIND_OVERRIDES": json.dumps(NO_BACKOFF),
        "JOBS_RETRY_BUDGET_RATIO": "1000",
        "JOBS_RETRY_BUDGET_FLOOR": "1000000",
    }
    rig = Rig(opts, "dbcost_retry", env=env)
    rig.start_web()
    rig.stack.start_scheduler()
    rig.stack.start_worker(concurrency=2, timeout=120)
    started = meter.start()
    rig.submit(jobs, {"kind": "demo.flaky", "payload": {"fail_times": 1}})
    attempts = 2 * jobs
    wait_for(
        lambda: (
            int(
                rig.scalar(
                    f"{POLL} SELECT count(*) FROM jobs_attempt WHERE finished_at IS NOT NULL"
                )
            )
            >= attempts
        ),
        timeout=1800,
        interval=1.0,
        what="retries drained",
    )
    return meter.stop("submit + fail + retry + succeed (per attempt)", attempts, started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", required=True)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--retry-only", action="store_true", help="the retry phase alone")
    args = parser.parse_args()
    phases = measure(args.admin_url, jobs=args.jobs, idle=args.idle, retry_only=args.retry_only)
    for phase in phases:
        print(json.dumps(phase.row(), indent=1))


if __name__ == "__main__":
    main()
