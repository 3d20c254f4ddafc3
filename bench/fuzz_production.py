"""Schemathesis over `/api/schema/` against gunicorn in production settings; report server errors.

    .venv/bin/python -m bench.fuzz_production --requests 5000 [--seed 1000]

`make fuzz` (bench/fuzz_api.py) runs the harness's local settings; this runs
`config.settings.production` as the compose deployment does behind nginx:
one trusted proxy (every request carries `X-Forwarded-Proto: https` and an
`X-Forwarded-For`), HTTPS redirect and HSTS on, demo kinds off, a fresh
PostgreSQL database and its own Redis, no worker. The client is a non-staff
user; the rate limits are raised (their documented knobs), so the fuzzer's
pace is not what is tested. Prints the figure and the web log's count of
tracebacks and ERROR lines; exits 1 on any 5xx, 4xx outside the error
shape, traceback or ERROR.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")

from devstack.postgres import create_database, drop_database  # noqa: E402
from devstack.processes import Stack  # noqa: E402
from devstack.services import RedisServer, free_port  # noqa: E402
from tests.integration.fuzz import Tally, fresh_seed, fuzz_schema  # noqa: E402
from tests.integration.harness import require_postgres  # noqa: E402

USER_SCRIPT = (
    "from django.contrib.auth.models import User\n"
    "from rest_framework.authtoken.models import Token\n"
    "user = User.objects.create_user('fuzz', password=None)\n"
    "print('TOKEN=' + Token.objects.create(user=user).key)\n"
)
# What nginx in front adds to every request (JOBS_TRUSTED_PROXY_COUNT=1).
PROXY_HEADERS = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "198.51.100.1"}
# A logged traceback, not a generated path with the word in it (schemathesis
# sends "/api/jobs/Traceback/cancel/").
TRACEBACK = re.compile(r"^Traceback \(most recent call last\):", re.MULTILINE)
# A log record at ERROR or above (LOGGING's "plain" format) or gunicorn's own;
# not a fuzzed path that happens to contain the word.
ERROR_LINE = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (?:ERROR|CRITICAL) |\[[^]]+\] \[\d+\] \[(?:ERROR|CRITICAL)\])",
    re.MULTILINE,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000, help="requests to send at least")
    parser.add_argument("--seed", type=int, default=None, help="first round's seed (random)")
    args = parser.parse_args()

    admin_url = require_postgres()
    workdir = Path(tempfile.mkdtemp(prefix="jobs-fuzz-production-"))
    name = f"jobs_fuzz_prod_{uuid.uuid4().hex[:8]}"
    database_url = create_database(name, admin_url=admin_url)
    redis_server = RedisServer().start()
    stack = Stack(
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "DJANGO_SECRET_KEY": "fuzz-" + uuid.uuid4().hex * 2,
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_server.url,
            "CELERY_BROKER_URL": redis_server.url,
            "DJANGO_STATIC_ROOT": str(workdir / "static"),
            "JOBS_METRICS_DIR": str(workdir / "metrics"),
            "OTEL_SDK_DISABLED": "true",
            "LOG_LEVEL": "WARNING",
            "JOBS_TRUSTED_PROXY_COUNT": "1",
            "JOBS_API_RATE_PER_TOKEN": "10000/s",
            "JOBS_API_RATE_PER_ADDRESS": "10000/s",
            "JOBS_API_AUTH_FAILURE_RATE": "10000/s",
            "JOBS_QUEUE_MAX_READY": str(10**9),
        },
        logdir=workdir / "logs",
    )
    tally = Tally()
    started = time.monotonic()
    try:
        stack.run(["python", "manage.py", "migrate", "--no-input"], timeout=300)
        out = stack.run(["python", "manage.py", "shell", "-c", USER_SCRIPT]).stdout
        token = out.split("TOKEN=", 1)[1].split()[0]
        port = free_port()
        web = stack.start_web(port, workers=2, threads=4, timeout=90)
        base_url = f"http://127.0.0.1:{port}"
        seed = args.seed if args.seed is not None else fresh_seed()
        while tally.requests < args.requests:
            fuzz_schema(
                base_url, token, examples=500, tally=tally, seed=seed, headers=PROXY_HEADERS
            )
            print(f"seed {seed}: {tally.summary()}", flush=True)
            seed += 1
        log = web.log()
    finally:
        stack.stop(timeout=10)
        redis_server.stop()
        drop_database(name, admin_url=admin_url)
    tracebacks, errors = len(TRACEBACK.findall(log)), len(ERROR_LINE.findall(log))
    print(
        f"{time.monotonic() - started:.0f} s: {tally.summary()}; web log: "
        f"{tracebacks} tracebacks, {errors} ERROR lines"
    )
    for source, sent, status, body in (tally.server_errors + tally.bad_shapes)[:20]:
        print(f"\n{source} -> {status}\n  sent: {sent}\n  got:  {body}")
    return 1 if tally.server_errors or tally.bad_shapes or tracebacks or errors else 0


if __name__ == "__main__":
    sys.exit(main())
