"""Issue 21: a RabbitMQ NODE restart during submissions loses nothing.

The machine's RabbitMQ is never restarted: the platform's broker is a node
of the test's own (devstack.rabbitmq_node, spare ports, data in a temporary
directory), stopped with `rabbitmqctl stop` (the Erlang VM exits) while jobs
are submitted through the web API, then booted again on the same data. Its
quorum queues' messages must come back from disk; the outbox covers what
could not be published while it was down. Every accepted job must end
terminal exactly once. (`rabbitmqctl restart_vhost` is
test_broker_matrix's drill; Redis without persistence, test_multi_host's.)
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from devstack.rabbitmq_node import RabbitMQNode, rabbitmq_server_available
from devstack.services import free_port, wait_for
from tests.integration.harness import Platform
from tests.integration.multi_host import overlap_and_after_success

pytestmark = [pytest.mark.integration, pytest.mark.drill, pytest.mark.rabbitmq]

SUBMISSIONS = 120
STOP_AFTER = 30
# Submissions go on while the node is down: this many must be accepted meanwhile.
DURING_OUTAGE = 10


@pytest.fixture
def node() -> Iterator[RabbitMQNode]:
    if not rabbitmq_server_available():
        pytest.skip("Debian's rabbitmq-server is not installed")
    started = RabbitMQNode()
    try:
        boot = started.start()
        print(f"\nprivate RabbitMQ node {started.name} on :{started.port} up in {boot:.1f} s")
        yield started
    finally:
        started.close()


@pytest.mark.timeout(240)
def test_rabbitmq_node_restart_during_submissions_loses_nothing(
    node: RabbitMQNode, platform_factory: Callable[..., Platform]
) -> None:
    # (`node` first: its fixture is torn down after the platform's processes stop)
    # given a platform whose broker is the private node (no Redis: REDIS_URL is a closed port)
    began = time.monotonic()
    platform = platform_factory(
        "node_restart",
        env={
            "CELERY_BROKER_URL": node.url,
            "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "JOBS_STATE_STORE": "postgres",
            "JOBS_LOST_MESSAGE_CHECK_INTERVAL": "2",
            "JOBS_LOST_MESSAGE_MARGIN": "1",
        },
        worker_concurrency=2,
    )
    ids: list[str] = []
    refused: list[int] = []
    accepted_at: dict[str, float] = {}
    stop = threading.Event()
    node_down = threading.Event()
    during: list[str] = []

    def submit() -> None:
        while not stop.is_set() and len(ids) < SUBMISSIONS:
            response = platform.post_job(
                {"kind": "demo.sleep", "payload": {"seconds": 0.05, "step_seconds": 0.05}}
            )
            if response.status_code == 202:
                job_id = response.json()["id"]
                ids.append(job_id)
                accepted_at[job_id] = time.monotonic()
                if node_down.is_set():
                    during.append(job_id)
            else:
                refused.append(response.status_code)
            time.sleep(0.03)

    thread = threading.Thread(target=submit)
    thread.start()
    try:
        # when the node stops mid-stream, submissions go on while it is down, and it boots again
        wait_for(lambda: len(ids) >= STOP_AFTER, timeout=60, what=f"{STOP_AFTER} submissions")
        # (two attempts in flight when it stops: their acks are lost, their messages come back)
        in_flight = [
            platform.submit("demo.sleep", {"seconds": 2, "step_seconds": 0.1}) for _ in "ab"
        ]
        wait_for(
            lambda: all(platform.job(i)["status"] == "running" for i in in_flight),
            timeout=30,
            interval=0.05,
            what="2 long attempts running",
        )
        stopped_after = len(ids)
        t_stop = time.monotonic()
        node.stop()
        node_down.set()
        stop_took = time.monotonic() - t_stop
        wait_for(
            lambda: len(during) >= DURING_OUTAGE,
            timeout=60,
            what=f"{DURING_OUTAGE} submissions while the node is down",
        )
        boot = node.start()
        node_down.clear()
        up_at = time.monotonic()
        downtime = up_at - t_stop
        wait_for(lambda: len(ids) >= SUBMISSIONS, timeout=120, what=f"{SUBMISSIONS} submissions")
    finally:
        stop.set()
        thread.join(timeout=60)

    # then every accepted job succeeds, exactly once: nothing lost, nothing run twice
    def succeeded() -> int:
        return int(
            platform.scalar(
                "SELECT count(*) FROM jobs_job WHERE status = 'succeeded' AND id::text = ANY(%s)",
                (ids,),
            )
        )

    wait_for(
        lambda: succeeded() == len(ids),
        timeout=120,
        interval=0.25,
        what=f"{len(ids)} jobs succeeded",
    )
    all_done = time.monotonic()
    overlapping, after_success, doubles = overlap_and_after_success(platform)
    successes = platform.scalar(
        "SELECT count(*) FROM jobs_attempt WHERE outcome = 'succeeded' AND job_id::text = ANY(%s)",
        (ids,),
    )
    last_during = max(
        platform.scalar(
            "SELECT extract(epoch FROM max(a.finished_at) - min(j.created_at)) FROM jobs_job j"
            " JOIN jobs_attempt a ON a.job_id = j.id AND a.outcome = 'succeeded'"
            " WHERE j.id::text = ANY(%s)",
            (during,),
        ),
        0,
    )
    redelivered = platform.scalar(
        "SELECT count(*) FROM jobs_attempt WHERE job_id::text = ANY(%s) AND number > 1", (ids,)
    )
    print(
        f"node stopped after {stopped_after} accepted submissions (stop {stop_took:.1f} s,"
        f" down {downtime:.1f} s, boot {boot:.1f} s); accepted {len(ids)}, {len(during)} of"
        f" them while it was down; refused {refused}; all {len(ids)} succeeded"
        f" {all_done - up_at:.1f} s after the node was back (the outage's submissions:"
        f" first created -> last succeeded {float(last_during):.1f} s); attempts past the"
        f" first {redelivered}; wall {time.monotonic() - began:.1f} s;"
        f" load {os.getloadavg()[0]:.2f}"
    )
    for job_id in in_flight:
        job = platform.wait_job(job_id, timeout=60)
        assert job["status"] == "succeeded", job
        assert [a["outcome"] for a in job["attempts"]] == ["succeeded"], job
    assert successes == len(ids) == len(set(ids))
    assert (overlapping, after_success, doubles) == (0, 0, 0)
    # a refusal is the documented backpressure answer, never an error
    assert set(refused) <= {503}, refused
    # and no process built a Redis client from the amqp:// URL, none needed Redis
    logs = platform.log_tails(chars=400_000)
    print(
        f"publishes deferred to the outbox: {logs.count('publish deferred to the outbox')};"
        f" redelivered duplicates dropped unrun: {logs.count('(duplicate suppressed)')}"
    )
    assert "Redis URL must specify" not in logs
    assert "redis.exceptions" not in logs
    assert "Error 111 connecting to 127.0.0.1" not in logs
