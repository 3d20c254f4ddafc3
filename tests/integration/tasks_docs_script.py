"""The documentation's enqueue/get_result/refresh/run_after/priority calls, in one Django process.

Run with `python manage.py shell -c "exec(open(PATH).read())"` against a platform; prints
`RESULTS=<json>` for tests/integration/test_tasks_docs.py.
"""

import json
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.utils import timezone

if TYPE_CHECKING:
    from django_tasks import default_task_backend
else:
    try:
        from django.tasks import default_task_backend
    except ImportError:  # Django 5.2: the backport
        from django_tasks import default_task_backend

from tests.tasks_docs_app.tasks import (
    email_users,
    email_users_prioritised,
    email_users_with_context,
)

ARGS: dict[str, Any] = {
    "emails": ["user@example.com"],
    "subject": "You have a message",
    "message": "Hello there!",
}
out: dict[str, Any] = {}


def settle(result: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not result.is_finished and time.monotonic() < deadline:
        time.sleep(0.1)
        result.refresh()
    return result


result = email_users.enqueue(**ARGS)
out["enqueued"] = str(result.status)
settle(result)
out["status"] = str(result.status)
out["return_value"] = result.return_value
out["attempts"] = result.attempts
out["worker_ids"] = result.worker_ids
out["id"] = result.id
out["get_result"] = str(email_users.get_result(result.id).status)
out["backend_get_result"] = default_task_backend.get_result(result.id).return_value
stamps: list[Any] = [result.enqueued_at, result.started_at, result.finished_at]
out["finished_after_start"] = None not in stamps and stamps == sorted(stamps)

high = email_users.using(priority=10).enqueue(**ARGS)
declared = email_users_prioritised.enqueue(**ARGS)
out["priorities"] = [str(settle(high).status), str(settle(declared).status)]

context_result = settle(email_users_with_context.enqueue(**ARGS))
out["context"] = context_result.return_value

due = timezone.now() + timedelta(seconds=3)
later = email_users.using(run_after=due).enqueue(**ARGS)
out["run_after_waiting"] = str(later.status)
settle(later)
assert later.started_at is not None
out["run_after_started_late_by"] = (later.started_at - due).total_seconds()
out["run_after_status"] = str(later.status)
print("RESULTS=" + json.dumps(out, default=str))
