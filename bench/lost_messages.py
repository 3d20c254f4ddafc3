"""Cost of one lost-message check with a large backlog of queued jobs.

    .venv/bin/python -m bench.lost_messages --jobs 100000 --passes 20

Builds a fresh PostgreSQL database (migrated) and its own redis-server, then
bulk-loads `--jobs` queued rows and their messages (a real job_publish
message as template, stamps 1 ms apart, LPUSHed in publish order into the
default queue's priority sub-queues by the jobs' priorities), plus 8 jobs
held unacknowledged by a consumer and 8 whose messages vanished. Then times
`lost_message_suspects` (what the scheduler runs every
JOBS_LOST_MESSAGE_CHECK_INTERVAL) over `--passes` passes, split into its
broker read and its database query, and prints the median. For scale, the
same for a naive check that reads every message (LRANGE 0 -1 and parse),
and the check right after a FLUSHDB (every job a suspect, LIMIT rows read).
Prints the plan of the candidate query (EXPLAIN ANALYZE).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from devstack.postgres import create_database, drop_database, ensure_postgres  # noqa: E402
from devstack.services import RedisServer, free_port  # noqa: E402

HELD = 8
VANISHED = 8


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()

    admin_url = ensure_postgres()
    redis_server = RedisServer().start()
    db_name = f"bench_lost_{os.getpid()}"
    database_url = create_database(db_name, admin_url=admin_url)
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.local",
            "DJANGO_DEBUG": "false",
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_server.url,
            "CELERY_BROKER_URL": redis_server.url,
            "JOBS_METRICS_DIR": f"/tmp/{db_name}-metrics",
            "JOBS_SCHEDULER_METRICS_PORT": str(free_port()),
            "OTEL_SDK_DISABLED": "true",
            "LOG_LEVEL": "WARNING",
        }
    )
    try:
        run(args.jobs, args.passes)
    finally:
        from django.db import connections  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

        connections.close_all()
        drop_database(db_name, admin_url=admin_url)
        redis_server.stop()


def run(jobs: int, passes: int) -> None:
    import django  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    django.setup()
    import redis  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from django.core.management import call_command  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from django.db import connection  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from django.utils import timezone  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    from jobs import broker, selectors, services  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from jobs.models import Job, JobStatus  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from jobs.scheduler import LOST_MESSAGE_LIMIT  # noqa: PLC0415 - after django.setup(): this script sets Django up itself
    from jobs.services import lost_messages  # noqa: PLC0415 - after django.setup(): this script sets Django up itself

    call_command("migrate", verbosity=0)
    client = redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])

    # A real message as template: one job published by job_publish.
    template_job = Job.objects.create(
        kind="demo.flaky",
        queue="default",
        payload={"fail_times": 0},
        status=JobStatus.QUEUED,
        max_attempts=5,
        request_fingerprint="t",
        enqueued_at=timezone.now(),
    )
    assert services.job_publish(job_id=template_job.id)
    template = json.loads(client.rpop("default"))  # type: ignore[arg-type]
    template_job.delete()

    started = time.perf_counter()
    base = timezone.now() - timedelta(milliseconds=jobs + 60_000)
    rows = []
    for i in range(jobs + HELD + VANISHED):
        # The consumed ones (the first HELD + VANISHED) a minute before the rest,
        # beyond the check's 2 s margin.
        offset = timedelta(milliseconds=i) - (
            timedelta(seconds=60) if i < HELD + VANISHED else timedelta(0)
        )
        rows.append(
            Job(
                id=uuid.uuid4(),
                kind="demo.flaky",
                queue="default",
                priority=i % 10,
                payload={"fail_times": 0},
                status=JobStatus.QUEUED,
                max_attempts=5,
                request_fingerprint=f"f{i}",
                enqueued_at=base + offset,
                published_at=base + offset + timedelta(microseconds=500),
            )
        )
    Job.objects.bulk_create(rows, batch_size=5000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job")
    loaded_rows = time.perf_counter() - started

    # The oldest HELD + VANISHED jobs were consumed: HELD sit in `unacked`, the
    # rest vanished. Every other job's message waits, pushed in publish order.
    started = time.perf_counter()
    keys = dict(zip(broker.priority_steps(), broker.queue_keys("default"), strict=True))
    pipe = client.pipeline(transaction=False)
    for n, job in enumerate(rows):
        message = json.loads(json.dumps(template))
        message["headers"]["id"] = f"{job.id}:1"
        assert job.published_at is not None
        stamp = job.published_at - timedelta(microseconds=400)
        message["headers"][broker.PUBLISHED_AT_HEADER] = stamp.isoformat()
        raw = json.dumps(message)
        if n < HELD:
            pipe.hset(broker.unacked_key(), f"tag-{n}", json.dumps([message, "", "default"]))
        elif n >= HELD + VANISHED:
            pipe.lpush(keys[broker.step_of(job.priority)], raw)
        if n % 5000 == 4999:
            pipe.execute()
    pipe.execute()
    loaded_messages = time.perf_counter() - started
    ready = sum(client.llen(k) for k in keys.values())
    print(
        f"loaded {len(rows):,} queued rows in {loaded_rows:.1f}s and {ready:,} messages"
        f" ({client.info('memory')['used_memory_human']} in Redis) in {loaded_messages:.1f}s"
    )

    reads, nows, queries, checks = [], [], [], []
    found: dict = {}
    for _ in range(passes):
        t0 = time.perf_counter()
        snapshot = broker.read_tails(["default"], window=lost_messages.TAIL_WINDOW)
        t1 = time.perf_counter()
        now = selectors.database_now()
        t2 = time.perf_counter()
        horizons = [
            selectors.SubQueueHorizon(
                queue="default",
                priorities=lost_messages._priorities_of(t.step),
                before=(t.boundary() or now) - timedelta(seconds=2),
            )
            for t in snapshot.tails
        ]
        list(
            selectors.jobs_published_before_horizons(
                horizons=horizons, limit=LOST_MESSAGE_LIMIT
            ).values_list("id", "kind", "queue", "published_at")
        )
        t3 = time.perf_counter()
        found = services.lost_message_suspects(
            queues=["default"], margin=2.0, held_after=600.0, limit=LOST_MESSAGE_LIMIT
        )
        reads.append(t1 - t0)
        nows.append(t2 - t1)
        queries.append(t3 - t2)
        checks.append(time.perf_counter() - t3)
    assert len(found) == VANISHED, found
    naive = []
    for _ in range(max(3, passes // 5)):
        t0 = time.perf_counter()
        for key in keys.values():
            [broker.message_facts(json.loads(raw)) for raw in client.lrange(key, 0, -1)]
        naive.append(time.perf_counter() - t0)

    # The candidate query's plan, with the horizons of this state.
    now = selectors.database_now()
    snapshot = broker.read_tails(["default"], window=lost_messages.TAIL_WINDOW)
    horizons = [
        selectors.SubQueueHorizon(
            queue="default",
            priorities=lost_messages._priorities_of(t.step),
            before=(t.boundary() or now) - timedelta(seconds=2),
        )
        for t in snapshot.tails
    ]
    query = selectors.jobs_published_before_horizons(horizons=horizons, limit=LOST_MESSAGE_LIMIT)
    plan = query.values_list("id", "kind", "queue", "published_at").explain(analyze=True)

    client.flushdb()
    flushed = []
    for _ in range(max(3, passes // 5)):
        t0 = time.perf_counter()
        after = services.lost_message_suspects(
            queues=["default"], margin=2.0, held_after=600.0, limit=LOST_MESSAGE_LIMIT
        )
        flushed.append(time.perf_counter() - t0)
    assert len(after) == LOST_MESSAGE_LIMIT

    print(f"\n{jobs:,} queued jobs, {HELD} held unacknowledged, {VANISHED} vanished; median of")
    print(f"{passes} passes (ms):\n")
    print("| what                                         | ms      | suspects |")
    print("|----------------------------------------------|---------|----------|")
    print(f"| broker read (LRANGE tails + HVALS, 1 trip)   | {median_ms(reads):7.2f} |          |")
    print(f"| database now (1 trip)                        | {median_ms(nows):7.2f} |          |")
    print(
        f"| candidate query (1 trip)                     | {median_ms(queries):7.2f} |          |"
    )
    print(
        f"| one whole check (DB now + broker + query)    | {median_ms(checks):7.2f} | {len(found):8} |"
    )
    print(f"| naive: read and parse every message          | {median_ms(naive):7.1f} |          |")
    print(
        f"| check after FLUSHDB (every row a suspect)    | {median_ms(flushed):7.1f} | {len(after):8} |"
    )
    print("\nPlan of the candidate query:\n")
    print(plan)


if __name__ == "__main__":
    main()
