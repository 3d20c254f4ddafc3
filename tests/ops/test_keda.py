"""platform/keda/: the autoscaling examples validate, agree with each other, and give a
worker the shutdown grace its largest hard time limit needs (issue 21, item 4).

No kubectl or cluster here: each document is checked with jsonschema against
tests/ops/schemas/keda-manifests.schema.json (written from KEDA's and
Kubernetes' documented fields; its $comment names the pages).
"""

from __future__ import annotations

import json
import math
from io import StringIO
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from django.core.management import CommandError, call_command

from jobs.shutdown_grace import MARGIN_SECONDS, required_grace
from observability.metrics import SCRAPE_TIME_SERIES
from tests.ops.promql import metric_names
from tests.ops.tools import PLATFORM, ROOT

KEDA = PLATFORM / "keda"
MANIFESTS = sorted(KEDA.glob("*.yaml"))
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "keda-manifests.schema.json").read_text())


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def _one(path: Path, kind: str) -> dict[str, Any]:
    (found,) = [doc for doc in _documents(path) if doc["kind"] == kind]
    return found


def _deployment() -> dict[str, Any]:
    return _one(KEDA / "worker-deployment.yaml", "Deployment")


def _concurrency() -> int:
    (container,) = _deployment()["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    return int(env["JOBS_WORKER_CONCURRENCY"])


def _scaled_objects() -> dict[str, dict[str, Any]]:
    return {
        path.name: _one(path, "ScaledObject")
        for path in MANIFESTS
        if path.name.startswith("scaledobject-")
    }


def test_the_schema_is_a_valid_json_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_keda_manifest_validates_against_the_schema(path: Path) -> None:
    documents = _documents(path)
    assert documents
    for document in documents:
        jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_the_schema_refuses_a_misspelt_field_and_a_wrong_protocol() -> None:
    # given the Prometheus ScaledObject with a typo, and the RabbitMQ one over AMQP's "amq"
    typo = _one(KEDA / "scaledobject-prometheus.yaml", "ScaledObject")
    typo["spec"]["pollingIntervall"] = typo["spec"].pop("pollingInterval")
    rabbit = _one(KEDA / "scaledobject-rabbitmq.yaml", "ScaledObject")
    rabbit["spec"]["triggers"][0]["metadata"]["protocol"] = "amq"
    # then both are refused
    for document in (typo, rabbit):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(document, SCHEMA, cls=jsonschema.Draft202012Validator)


def test_scaled_objects_target_the_worker_one_replica_per_worker_concurrency() -> None:
    deployment, slots = _deployment(), _concurrency()
    objects = _scaled_objects()
    assert set(objects) == {"scaledobject-prometheus.yaml", "scaledobject-rabbitmq.yaml"}
    for name, scaled in objects.items():
        spec = scaled["spec"]
        assert spec["scaleTargetRef"]["name"] == deployment["metadata"]["name"], name
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"], name
        (trigger,) = spec["triggers"]
        target = trigger["metadata"].get("threshold") or trigger["metadata"]["value"]
        assert float(target) == slots, name


def test_the_prometheus_trigger_reads_jobs_backlog_and_errs_on_an_empty_answer() -> None:
    (trigger,) = _scaled_objects()["scaledobject-prometheus.yaml"]["spec"]["triggers"]
    assert metric_names(trigger["metadata"]["query"]) == {"jobs_backlog"}
    assert "jobs_backlog" in SCRAPE_TIME_SERIES
    # a missing series (database down) must not read as 0 and scale the workers down
    assert trigger["metadata"]["ignoreNullValues"] == "false"


def test_the_rabbitmq_trigger_counts_unacknowledged_messages_too() -> None:
    # AMQP's queue length is ready messages only: prefetched and running ones are unacked
    (trigger,) = _scaled_objects()["scaledobject-rabbitmq.yaml"]["spec"]["triggers"]
    assert trigger["metadata"]["protocol"] == "http"
    assert trigger["metadata"].get("excludeUnacknowledged", "false") == "false"
    assert trigger["metadata"]["mode"] == "QueueLength"


def test_worker_grace_covers_the_largest_hard_time_limit_and_margin() -> None:
    grace = _deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    needed = required_grace()
    assert needed.seconds == math.ceil(needed.hard_time_limit + MARGIN_SECONDS)
    assert grace >= needed.seconds, needed.describe()
    out = StringIO()
    call_command("jobs_shutdown_grace", check=grace, stdout=out)
    assert out.getvalue().startswith(f"terminationGracePeriodSeconds >= {needed.seconds} s")


def test_compose_worker_grace_covers_it_too() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    worker = compose["services"]["worker"]
    grace = worker.get("stop_grace_period") or compose["x-app"]["stop_grace_period"]
    assert grace.endswith("s"), grace
    assert float(grace[:-1]) >= required_grace().seconds, grace


def test_shutdown_grace_check_fails_for_a_kind_with_a_longer_hard_limit(settings: Any) -> None:
    # given an override that gives webhook.deliver a 600 s hard limit
    settings.JOBS_KIND_OVERRIDES = {
        "webhook.deliver": {"soft_time_limit": 500, "hard_time_limit": 600}
    }
    grace = _deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # then the shipped grace is refused, naming the kind and the grace it needs
    with pytest.raises(CommandError, match=r"needs 630 s: webhook.deliver's hard time limit 600"):
        call_command("jobs_shutdown_grace", check=grace)
