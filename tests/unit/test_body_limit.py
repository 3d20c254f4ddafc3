"""jobs.body_limit: a declared body over the limit is 413 before anything reads it."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import RequestDataTooBig
from django.test import Client, RequestFactory

from jobs.body_limit import DeclaredBodyLimitMiddleware

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path", ["/api/jobs/", "/api/jobs/00000000-0000-0000-0000-000000000000/cancel/", "/api/x/"]
)
@pytest.mark.parametrize("declared", ["262145", "1073741824", str(10**30)])
def test_declared_length_over_the_api_limit_is_413_in_the_error_shape(
    api_client: Any, path: str, declared: str
) -> None:
    answer = api_client.post(path, b"{}", content_type="application/json", CONTENT_LENGTH=declared)

    assert answer.status_code == 413
    body = answer.json()
    assert body == {
        "detail": body["detail"],
        "errors": [{"field": "body", "reason": body["detail"]}],
    }
    assert declared in body["detail"]
    assert "262144" in body["detail"]
    assert answer["Content-Length"] == str(len(answer.content))


def test_declared_length_at_the_limit_reaches_the_view(api_client: Any) -> None:
    answer = api_client.post(
        "/api/jobs/", b"{}", content_type="application/json", CONTENT_LENGTH="2"
    )

    assert answer.status_code == 400  # the parser read it: no kind, no payload


def test_admin_form_over_data_upload_max_memory_size_is_413_plain_text(settings: Any) -> None:
    answer = Client().post(
        "/admin/login/",
        "username=x",
        content_type="application/x-www-form-urlencoded",
        CONTENT_LENGTH=str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1),
    )

    assert answer.status_code == 413
    assert answer["Content-Type"].startswith("text/plain")


def test_request_data_too_big_raised_by_a_view_is_413_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    middleware = DeclaredBodyLimitMiddleware(lambda request: None)  # type: ignore[arg-type,return-value]
    request = RequestFactory().post("/admin/login/", "a=b", content_type="text/plain")

    answer = middleware.process_exception(request, RequestDataTooBig("too big"))

    assert answer is not None
    assert answer.status_code == 413
    assert not [r for r in caplog.records if r.exc_info]
