"""Baseline views in the platform's web: a bare `delay()` (P2) and an in-process pool (P5).

P2's hand-written baseline is a separate Django project (bench/anchor).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from bench.baseline.cpu import burn
from bench.stock_tasks import stock_noop


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
