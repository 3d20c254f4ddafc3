"""Ordinary Django views bringing their own work to the platform.

POST /example/word-count/   {"text": ...}        -> a job of the example.word_count kind
POST /example/slugify/      {"titles": [...]}    -> the slugify_titles Django task
GET  /example/jobs/<id>/                         -> status, progress and result
POST /example/jobs/<id>/cancel/

Login required; each user sees only their own jobs (jobs.ownership).
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET, require_POST

from example.tasks import slugify_titles
from jobs import client


def _body(request: HttpRequest) -> dict[str, Any]:
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        body = None
    return body if isinstance(body, dict) else {}


def _job(job: client.Job) -> dict[str, Any]:
    return {"id": str(job.id), "kind": job.kind, "status": job.status, "result": job.result}


@login_required
@require_POST
def word_count(request: HttpRequest) -> JsonResponse:
    try:
        with transaction.atomic():  # the message is published when this commits
            job = client.submit(
                "example.word_count",
                {"text": _body(request).get("text", "")},
                submitter=request.user,
            )
    except client.InvalidSubmission as exc:
        return JsonResponse({"errors": exc.errors}, status=400)
    except client.QueueFull as exc:
        return JsonResponse({"detail": str(exc)}, status=503)
    return JsonResponse(_job(job), status=202)


@login_required
@require_POST
def slugify(request: HttpRequest) -> JsonResponse:
    result = slugify_titles.enqueue(titles=list(_body(request).get("titles", [])))
    return JsonResponse({"id": result.id, "status": result.status}, status=202)


@login_required
@require_GET
def job_detail(request: HttpRequest, job_id: str) -> JsonResponse:
    try:
        return JsonResponse(_job(client.get(job_id, user=request.user)))
    except client.JobNotFound:
        return JsonResponse({"detail": "No job with that id."}, status=404)


@login_required
@require_POST
def job_cancel(request: HttpRequest, job_id: str) -> JsonResponse:
    try:
        return JsonResponse(_job(client.cancel(job_id, user=request.user)))
    except client.JobNotFound:
        return JsonResponse({"detail": "No job with that id."}, status=404)
    except client.InvalidTransition as exc:
        return JsonResponse({"detail": str(exc)}, status=409)
