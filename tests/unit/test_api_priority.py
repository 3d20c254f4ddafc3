"""Job priority: validated, stored, and published into kombu's priority sub-queue."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from jobs import broker
from jobs.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

FLAKY = {"kind": "demo.flaky", "payload": {"fail_times": 0}}


def _post(client: APIClient, body: Any) -> Any:
    return client.post("/api/jobs/", data=json.dumps(body), content_type="application/json")


@pytest.mark.parametrize(("priority", "list_index"), [(None, 0), (0, 0), (4, 1), (6, 2), (9, 3)])
def test_api_priority_publishes_into_the_matching_sub_queue(
    api_client: APIClient, broker_redis: redis.Redis, priority: int | None, list_index: int
) -> None:
    # when a job is submitted with a priority (committed, so it is published)
    body = {**FLAKY} if priority is None else {**FLAKY, "priority": priority}
    response = _post(api_client, body)

    # then it is stored and its message waits in kombu's list for that step
    assert response.status_code == 202, response.content
    assert Job.objects.get(id=response.json()["id"]).priority == priority
    lengths = [broker_redis.llen(key) for key in broker.queue_keys("default")]
    assert lengths == [1 if i == list_index else 0 for i in range(4)], lengths
    assert broker.ready_counts(["default"]) == {"default": 1}


@pytest.mark.parametrize("priority", [-1, 10, "high", 1.5])
def test_api_priority_out_of_range_is_400(api_client: APIClient, priority: Any) -> None:
    response = _post(api_client, {**FLAKY, "priority": priority})

    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["priority"]
    assert Job.objects.count() == 0


def test_api_priority_is_part_of_the_idempotent_request(api_client: APIClient) -> None:
    first = _post(api_client, {**FLAKY, "priority": 1, "idempotency_key": "k"})
    again = _post(api_client, {**FLAKY, "priority": 1, "idempotency_key": "k"})
    other = _post(api_client, {**FLAKY, "priority": 2, "idempotency_key": "k"})

    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 409)
