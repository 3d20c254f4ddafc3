"""Fuzz the live API with N generated requests (default 10,000); report server errors.

The same generators as the test suite (tests/integration/fuzz.py):
schemathesis over `/api/schema/` (positive and negative cases) and
hand-written strategies for hostile strings, numbers, depth and query
strings, here with fresh random seeds, round after round, until N
requests have been sent to one gunicorn + PostgreSQL + Redis (no worker:
accepted jobs stay queued).

    .venv/bin/python -m bench.fuzz_api --requests 10000 [--seed 123]

Needs PostgreSQL at 127.0.0.1:5432 (user postgres) or the pgserver
package; starts its own Redis. Prints the figure (requests, statuses,
server errors) and the first failures; exits 1 when any request got a
5xx or a 4xx outside the API's error shape.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")

from tests.integration.fuzz import (  # noqa: E402
    Tally,
    fresh_seed,
    fuzz_queries,
    fuzz_schema,
    fuzz_submissions,
)
from tests.integration.harness import PlatformFactory  # noqa: E402

# Examples per generator in one round; a round sends ~1,000 requests.
ROUND = {"bodies": 500, "queries": 150, "schema_per_mode": 175}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="requests to send at least")
    parser.add_argument("--seed", type=int, default=None, help="first round's seed (random)")
    args = parser.parse_args()

    factory = PlatformFactory(logroot=Path(tempfile.mkdtemp(prefix="jobs-fuzz-")))
    tally = Tally()
    started = time.monotonic()
    seeds = []
    try:
        platform = factory(
            "fuzz", env={"JOBS_QUEUE_MAX_READY": str(10**9)}, worker=False, scheduler=False
        )
        seed = args.seed if args.seed is not None else fresh_seed()
        while tally.requests < args.requests:
            seeds.append(seed)
            fuzz_submissions(
                platform.base_url,
                platform.session,
                examples=ROUND["bodies"],
                tally=tally,
                seed=seed,
            )
            fuzz_queries(
                platform.base_url,
                platform.session,
                examples=ROUND["queries"],
                tally=tally,
                seed=seed,
            )
            fuzz_schema(
                platform.base_url,
                platform.token,
                examples=ROUND["schema_per_mode"],
                tally=tally,
                seed=seed,
            )
            print(f"seed {seed}: {tally.summary()}", flush=True)
            seed = fresh_seed()
        stored = platform.row_count()
    finally:
        factory.close()

    elapsed = time.monotonic() - started
    print()
    print(f"seeds: {' '.join(map(str, seeds))}")
    print(f"{tally.summary()}; jobs stored {stored}; {elapsed:.0f} s")
    for source, sent, status, body in (tally.server_errors + tally.bad_shapes)[:20]:
        print(f"\n{source} -> {status}\n  sent: {sent}\n  got:  {body}")
    return 1 if tally.server_errors or tally.bad_shapes else 0


if __name__ == "__main__":
    raise SystemExit(main())
