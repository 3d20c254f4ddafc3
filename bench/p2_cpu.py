"""CPU per request of P2's three paths, by process: `python -m bench.p2_cpu [--requests N] [--rounds R]`.

P2's setup (bench/p2_enqueue.py: one gunicorn as shipped with the overlay
settings `bench.baseline.settings`, 8 keep-alive clients, PostgreSQL, no
worker) and, around each run, the CPU time (user + system, psutil) of the
gunicorn workers, every PostgreSQL server process, every redis-server and
this client, divided by the requests: milliseconds of CPU per request. On
a shared 2-core machine the rate follows whatever else runs; CPU per
request says what each path costs. Prints one line per path and round; not
recorded (docs/performance.md quotes it).
"""

from __future__ import annotations

import argparse

import psutil

from bench.http_load import http_load
from bench.p2_enqueue import BODY, PATHS
from bench.processes import children
from bench.rig import Rig, standalone


def _cpu_seconds(processes: list[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print CPU milliseconds per request by process group."""
    parser = argparse.ArgumentParser(prog="python -m bench.p2_cpu", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000, help="POSTs per run (default 2000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the three paths")
    args = parser.parse_args(argv)
    with standalone("jobs-bench-p2cpu-") as opts:
        rig = Rig(opts, "p2cpu", settings="bench.baseline.settings")
        web = rig.start_web()
        for path in PATHS.values():
            http_load(rig.web_port, "POST", path, total=100, clients=8, body=BODY, headers=rig.auth)
        groups = {
            "gunicorn": [psutil.Process(pid) for pid in children(web.pid)],
            "postgres": [p for p in psutil.process_iter(["name"]) if p.name() == "postgres"],
            "redis": [p for p in psutil.process_iter(["name"]) if p.name() == "redis-server"],
            "client": [psutil.Process()],
        }
        print(f"CPU ms per request ({args.requests} POSTs per run, 8 clients)")
        for _ in range(args.rounds):
            for name, path in PATHS.items():
                before = {group: _cpu_seconds(ps) for group, ps in groups.items()}
                result = http_load(
                    rig.web_port,
                    "POST",
                    path,
                    total=args.requests,
                    clients=8,
                    body=BODY,
                    headers=rig.auth,
                )
                per = {
                    group: (_cpu_seconds(ps) - before[group]) / args.requests * 1000
                    for group, ps in groups.items()
                }
                keys = rig.redis.keys("default*")
                if keys:
                    rig.redis.delete(*keys)
                shown = "  ".join(f"{group} {ms:.2f}" for group, ms in per.items())
                print(
                    f"{name:12s} {result.rate:6.0f} req/s  {shown}  total {sum(per.values()):.2f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
