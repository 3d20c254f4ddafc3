"""HTTP load for `python -m bench`: many keep-alive clients against one port, latencies kept."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class LoadResult:
    """`count` requests in `seconds` (wall); `latencies` in seconds; `errors` non-2xx answers."""

    count: int
    seconds: float
    latencies: list[float]
    errors: int

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds else float("nan")


def http_load(
    port: int,
    method: str,
    path: str,
    *,
    total: int,
    clients: int,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> LoadResult:
    """`total` requests spread over `clients` keep-alive connections (one thread each).

    http.client, not requests: the client must cost far less than the server.
    """
    payload = json.dumps(body).encode() if body is not None else None
    send_headers = {"Content-Type": "application/json", **(headers or {})}
    latencies: list[float] = []
    errors = [0]
    counter = iter(range(total))
    lock = threading.Lock()

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine: list[float] = []
        while True:
            with lock:
                if next(counter, None) is None:
                    break
            t0 = time.perf_counter()
            try:
                conn.request(method, path, body=payload, headers=send_headers)
                response = conn.getresponse()
                response.read()
                ok = 200 <= response.status < 300
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                ok = False
            mine.append(time.perf_counter() - t0)
            if not ok:
                with lock:
                    errors[0] += 1
        conn.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return LoadResult(total, time.perf_counter() - started, latencies, errors[0])
