"""Baseline views: what a user would write instead of `POST /api/jobs/` (P2), and an in-process pool (P5)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bench.baseline.cpu import burn
from bench.stock_tasks import stock_noop
from jobs.models import Job


class HandwrittenSerializer(serializers.Serializer):
    kind = serializers.CharField(max_length=100)
    payload = serializers.JSONField()


class HandwrittenSubmit(APIView):
    """Token-authenticated (the project's DRF defaults): insert a row, `delay()` on commit, 202."""

    def post(self, request: Request) -> Response:
        serializer = HandwrittenSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            job = Job.objects.create(
                kind=serializer.validated_data["kind"],
                payload=serializer.validated_data["payload"],
                max_attempts=1,
                request_fingerprint="",
            )
            transaction.on_commit(stock_noop.delay)
        return Response({"id": str(job.pk)}, status=status.HTTP_202_ACCEPTED)


@csrf_exempt
def bare_delay(request: HttpRequest) -> JsonResponse:
    """No auth, no row: only `delay()`."""
    stock_noop.delay()
    return JsonResponse({"queued": True}, status=202)


# P5's other design: CPU-heavy work in a thread pool inside the web process.
# One thread per gunicorn worker: two burners in all, as the worker's two children.
_pool = ThreadPoolExecutor(1, thread_name_prefix="bench-cpu")
_pending = 0
_generation = 0
_lock = threading.Lock()


def _run(seconds: float, generation: int) -> None:
    global _pending
    try:
        if generation == _generation:
            burn(seconds)
    finally:
        with _lock:
            _pending -= 1


@csrf_exempt
def inprocess_cpu(request: HttpRequest) -> JsonResponse:
    """POST ?seconds=&count=: queue `count` burns in this process's pool; ?cancel=1 drops the
    queued ones; GET: this process's pending count."""
    global _pending, _generation
    if request.method == "POST":
        if request.GET.get("cancel"):
            with _lock:
                _generation += 1
        else:
            seconds = float(request.GET.get("seconds", "0.1"))
            count = int(request.GET.get("count", "1"))
            with _lock:
                _pending += count
            for _ in range(count):
                _pool.submit(_run, seconds, _generation)
    body: dict[str, Any] = {"pid": os.getpid(), "pending": _pending}
    return JsonResponse(body)
