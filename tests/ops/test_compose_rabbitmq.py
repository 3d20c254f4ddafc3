"""docker-compose.rabbitmq.yml: the whole stack on RabbitMQ (quorum queues), no Redis.

Issue 21, item 5. It must validate with Debian's docker-compose and stay the
base file (docker-compose.yml) in every service but the broker.
"""

from __future__ import annotations

import pytest

from tests.ops.tools import ROOT, load_yaml, require_binary, run

RABBITMQ_COMPOSE = ROOT / "docker-compose.rabbitmq.yml"
BASE_COMPOSE = ROOT / "docker-compose.yml"
# Variables the RabbitMQ file sets or drops in the app environment.
BROKER_VARIABLES = {
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "JOBS_STATE_STORE",
    "JOBS_RETRY_BUDGET_REDIS_URL",
    "JOBS_RETRY_BUDGET_REDIS_TIMEOUT",
}


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_debian_docker_compose_accepts_the_rabbitmq_file() -> None:
    docker_compose = require_binary("docker-compose")
    result = run([docker_compose, "-f", str(RABBITMQ_COMPOSE), "config", "-q"], cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rabbitmq_file_runs_on_rabbitmq_with_no_redis() -> None:
    compose = load_yaml(RABBITMQ_COMPOSE)
    assert "redis" not in compose["services"]
    assert "redis://" not in RABBITMQ_COMPOSE.read_text()
    environment = compose["x-app"]["environment"]
    assert environment["CELERY_BROKER_URL"].startswith("amqp://")
    assert environment["JOBS_STATE_STORE"] == "postgres"
    for name in ("web", "worker", "scheduler", "flower"):
        assert "rabbitmq" in compose["services"][name]["depends_on"], name


def test_rabbitmq_file_is_the_base_file_but_for_the_broker() -> None:
    base, rabbit = load_yaml(BASE_COMPOSE), load_yaml(RABBITMQ_COMPOSE)
    assert set(base["services"]) - {"redis"} == set(rabbit["services"]) - {"rabbitmq"}
    for name, service in base["services"].items():
        if name == "redis":
            continue
        other = dict(rabbit["services"][name])
        service = dict(service)
        for definition in (service, other):
            definition.pop("depends_on", None)
            definition.pop("environment", None)
        assert service == other, name
    base_env = {k: v for k, v in base["x-app"]["environment"].items() if k not in BROKER_VARIABLES}
    rabbit_env = {
        k: v for k, v in rabbit["x-app"]["environment"].items() if k not in BROKER_VARIABLES
    }
    assert base_env == rabbit_env
