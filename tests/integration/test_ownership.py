"""Other users' jobs and idempotency keys over a real web, worker and PostgreSQL (issue 18, 3 and 4).

Issue 18, item 3: "With two non-staff tokens A and B, B can GET A's job
(payload included, e.g. a webhook Authorization header), list it, cancel
it while running and requeue it when dead." Item 4: "B sending A's key with
A's body gets A's job (200); with another body, a 409 naming A's job id; B
can squat a predictable key so A's real submission is refused." Expected: a
404 in the error shape for B (as for a missing id), nothing of A's job in
any answer to B, and staff seeing and acting on all only with jobs.view_job
/ jobs.change_job.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.integration.harness import HTTP_TIMEOUT, Platform

SECRET = "Bearer a-secret-of-A"


class Client:
    """One token's view of the API."""

    def __init__(self, platform: Platform, token: str) -> None:
        self.platform = platform
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Token {token}"

    def get(self, path: str, **params: Any) -> requests.Response:
        return self.session.get(self.platform.url(path), params=params, timeout=HTTP_TIMEOUT)

    def post(self, path: str, body: Any = None, **headers: str) -> requests.Response:
        return self.session.post(
            self.platform.url(path), json=body, headers=headers, timeout=HTTP_TIMEOUT
        )


@pytest.fixture(scope="module")
def people(platform: Platform) -> Iterator[dict[str, Client]]:
    suffix = uuid.uuid4().hex[:6]
    tokens = platform.create_users(
        {
            f"a-{suffix}": {},
            f"b-{suffix}": {},
            f"staff-{suffix}": {"staff": True},
            f"viewer-{suffix}": {"staff": True, "perms": ["view_job"]},
        }
    )
    clients = {name.split("-")[0]: Client(platform, token) for name, token in tokens.items()}
    yield clients
    for client in clients.values():
        client.session.close()


def _submit(client: Client, body: dict[str, Any], **headers: str) -> str:
    response = client.post("/api/jobs/", body, **headers)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _status(platform: Platform, job_id: str) -> str:
    return platform.scalar("SELECT status FROM jobs_job WHERE id = %s", (job_id,))


@pytest.mark.integration
def test_b_cannot_read_list_cancel_or_requeue_as_jobs(
    platform: Platform, people: dict[str, Client]
) -> None:
    a, b = people["a"], people["b"]
    # given A's running job, A's dead job and A's webhook job carrying a secret header
    running = _submit(a, {"kind": "demo.flaky", "payload": {"sleep_seconds": 60, "fail_times": 0}})
    dead = _submit(a, {"kind": "demo.flaky", "payload": {"fail_times": 100}})
    secret = _submit(
        a,
        {
            "kind": "webhook.deliver",
            "payload": {"url": "http://127.0.0.1:9/hook", "headers": {"Authorization": SECRET}},
        },
    )
    platform.wait_job(running, statuses=frozenset({"running"}))
    platform.wait_job(dead, statuses=frozenset({"dead"}))
    missing = str(uuid.uuid4())

    # when B reads, lists, cancels and requeues them
    for job_id in (running, dead, secret):
        theirs, nothing = b.get(f"/api/jobs/{job_id}/"), b.get(f"/api/jobs/{missing}/")
        # then each is answered exactly as an id that does not exist
        assert theirs.status_code == nothing.status_code == 404
        assert theirs.json() == nothing.json()
        assert set(theirs.json()) == {"detail", "errors"}
    listing = b.get("/api/jobs/", page_size=100).text + b.get("/api/jobs/", kind="demo.flaky").text
    assert not {running, dead, secret} & {w.strip('"') for w in listing.split()}
    assert SECRET not in listing
    for path in (f"/api/jobs/{running}/cancel/", f"/api/jobs/{dead}/requeue/"):
        refused = b.post(path)
        assert refused.status_code == 404, refused.text
        assert running not in refused.text
        assert dead not in refused.text
    # and A's jobs are as they were
    assert _status(platform, running) == "running"
    assert _status(platform, dead) == "dead"

    # staff without permissions is any user; staff with view sees but may not act
    assert people["staff"].get(f"/api/jobs/{running}/").status_code == 404
    viewer = people["viewer"]
    seen = viewer.get(f"/api/jobs/{secret}/")
    assert seen.status_code == 200
    refused = viewer.post(f"/api/jobs/{running}/cancel/")
    assert refused.status_code == 403
    assert [e["field"] for e in refused.json()["errors"]] == ["Authorization"]
    assert _status(platform, running) == "running"

    # A acts on its own jobs; the integration user (jobs.change_job) on anyone's
    assert a.post(f"/api/jobs/{running}/cancel/").json()["status"] == "cancelled"
    requeued = platform.session.post(platform.url(f"/api/jobs/{dead}/requeue/"), timeout=30)
    assert requeued.status_code == 200, requeued.text
    a.post(f"/api/jobs/{dead}/cancel/")
    a.post(f"/api/jobs/{secret}/cancel/")


@pytest.mark.integration
def test_idempotency_keys_are_per_submitter(platform: Platform, people: dict[str, Client]) -> None:
    a, b = people["a"], people["b"]
    body = {"kind": "demo.flaky", "payload": {"fail_times": 0}, "queue": "default"}
    key = f"order-{uuid.uuid4()}"

    # B squats the key A will use next, with a body of its own
    squat = b.post("/api/jobs/", {**body, "payload": {"fail_times": 1}}, **{"Idempotency-Key": key})
    assert squat.status_code == 202, squat.text
    # A's real submission is accepted, and A's retry of it returns A's job
    first = a.post("/api/jobs/", body, **{"Idempotency-Key": key})
    again = a.post("/api/jobs/", body, **{"Idempotency-Key": key})
    assert first.status_code == 202, first.text
    assert (again.status_code, again.json()["id"]) == (200, first.json()["id"])

    # B sending A's key with A's body gets a job of its own, not A's
    b_key = f"order-{uuid.uuid4()}"
    a_job = _submit(a, body, **{"Idempotency-Key": b_key})
    own = b.post("/api/jobs/", body, **{"Idempotency-Key": b_key})
    assert own.status_code == 202
    assert own.json()["id"] != a_job
    # and with another body, B's answer is about B's own job only, never A's id
    conflict = b.post(
        "/api/jobs/", {**body, "payload": {"fail_times": 2}}, **{"Idempotency-Key": b_key}
    )
    assert conflict.status_code == 409
    assert a_job not in conflict.text
    assert own.json()["id"] in conflict.text
    rows = platform.rows(
        "SELECT u.username FROM jobs_job j JOIN auth_user u ON u.id = j.created_by_id "
        "WHERE j.idempotency_key = %s ORDER BY u.username",
        (b_key,),
    )
    assert [r[0].split("-")[0] for r in rows] == ["a", "b"]
