"""CPU and wall time of one attempt's path in a worker child, A/B by one setting, in one process.

    .venv/bin/python -m bench.attempt_cpu JOBS_STATE_STORE=redis,postgres
    .venv/bin/python -m bench.attempt_cpu --jobs 3000 --block 100 NAME=A,B
    .venv/bin/python -m bench.attempt_cpu --jobs 6000 START_CHECKS=on,off

Queues `--jobs` no-op `demo.flaky` jobs through the API of a platform on a
fresh PostgreSQL database (bench.rig), stops its processes, then runs
`jobs.runner.execute_attempt` for each job in this process, in blocks of
`--block` attempts, the setting alternating between its two values block
by block (A B A B ...). Prints, per value, the median CPU (process time)
and wall time per attempt over its blocks, the median CPU of the
PostgreSQL backend serving this process (user + system, read from its
pid; the server must be on this machine), and the ratios B / A. No Celery,
no pipe to a main process: the attempt path alone, which makes CPU per
attempt a steadier figure than a drain's rate on a shared machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from bench import start_checks  # noqa: E402
from bench.p1_drain import STORM_ENV  # noqa: E402
from bench.rig import Rig, standalone  # noqa: E402

# Not a setting: alternates bench.start_checks (the start without its flow-control checks).
START_CHECKS = "START_CHECKS"


def _cpu(process: psutil.Process) -> float:
    """User + system CPU seconds of `process` so far."""
    times = process.cpu_times()
    return float(times.user + times.system)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attempt_cpu", description=__doc__)
    parser.add_argument("setting", help="NAME=A,B: a Django setting and its two values")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--block", type=int, default=100)
    args = parser.parse_args(argv)
    name, _, values = args.setting.partition("=")
    pair = values.split(",")
    if not name or len(pair) != 2 or args.block < 1 or args.jobs < 2 * args.block:
        parser.error("give NAME=A,B, and --jobs at least two --block's worth")
    with standalone("attempt_cpu", jobs=args.jobs) as opts:
        rig = Rig(opts, "attempt_cpu", env=STORM_ENV)
        rig.start_web()
        rig.submit(args.jobs, {"kind": "demo.flaky", "payload": {"fail_times": 0}})
        rig.stack.stop()
        os.environ.update(rig.stack.env)
        import django  # noqa: PLC0415 - import cost: Django is set up for the rig's database only

        django.setup()
        from django.conf import settings  # noqa: PLC0415 - after django.setup()
        from django.db import connection, connections  # noqa: PLC0415 - after django.setup()

        from jobs import runner  # noqa: PLC0415 - after django.setup()
        from jobs.models import Job  # noqa: PLC0415 - after django.setup()

        # START_CHECKS=on,off: the start statement with and without its flow-control checks.
        checks = start_checks.switch() if name == START_CHECKS else None
        kind = bool if checks else type(getattr(settings, name))
        ids = [str(i) for i in Job.objects.values_list("id", flat=True)]
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = psutil.Process(cursor.fetchone()[0])
        samples: dict[str, list[tuple[float, float, float]]] = {value: [] for value in pair}
        for number in range(len(ids) // args.block):
            value = pair[number % 2]
            # bool("false") is True: a boolean setting reads its value as the env does.
            typed = value.lower() in {"1", "true", "yes", "on"} if kind is bool else kind(value)
            if checks:
                checks(bool(typed))
            else:
                setattr(settings, name, typed)
            block = ids[number * args.block : (number + 1) * args.block]
            cpu, wall, server = time.process_time(), time.perf_counter(), _cpu(backend)
            for job_id in block:
                runner.execute_attempt(job_id=job_id, attempt=1, hostname="attempt-cpu")
            samples[value].append(
                (
                    (time.process_time() - cpu) / len(block) * 1e3,
                    (time.perf_counter() - wall) / len(block) * 1e3,
                    (_cpu(backend) - server) / len(block) * 1e3,
                )
            )
        connections.close_all()  # before the rig drops its database
    medians = {
        value: tuple(statistics.median(run[i] for run in runs) for i in range(3))
        for value, runs in samples.items()
    }
    for value, (cpu_ms, wall_ms, server_ms) in medians.items():
        print(
            f"{name}={value}: CPU {cpu_ms:.3f} ms, wall {wall_ms:.3f} ms, PostgreSQL backend "
            f"CPU {server_ms:.3f} ms per attempt (median of {len(samples[value])} blocks of "
            f"{args.block})"
        )
    (cpu_a, wall_a, server_a), (cpu_b, wall_b, server_b) = medians[pair[0]], medians[pair[1]]
    print(
        f"B / A: CPU {cpu_b / cpu_a:.3f}, wall {wall_b / wall_a:.3f}, backend CPU "
        f"{server_b / server_a:.3f}; load {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
