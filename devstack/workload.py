"""The demo workload: plan jobs, submit them over the HTTP API, wait, measure.

Used by `manage.py jobs_demo` (which `make demo` runs against its own stack).
Everything goes through the public API with a token, as a client would:
POST /api/jobs/ with an Idempotency-Key (so a resent POST never makes a
second job), POST /api/jobs/{id}/cancel/, GET /api/jobs/?status=... for
progress and the paginated list for the final numbers.
"""

from __future__ import annotations

import csv
import random
import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import requests

from observability.memory import tree_rss_bytes

TERMINAL = ("succeeded", "dead", "cancelled")
ACTIVE = ("queued", "running", "retrying")
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
CITIES = [f"city-{n:02d}" for n in range(40)]


def generate_csv(path: Path, *, target_bytes: int, seed: int = 7) -> Path:
    """Write a CSV of about `target_bytes` bytes (numeric and text columns, some nulls).

    Deterministic for a seed; an existing file at least that large is reused.
    Written to a temporary name and renamed, so a reader never sees half a file.
    """
    if path.exists() and path.stat().st_size >= target_bytes:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    tmp = path.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "day", "city", "amount", "quantity", "score", "comment"])
        row = 0
        while handle.tell() < target_bytes:
            row += 1
            writer.writerow(
                [
                    row,
                    f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                    "" if rng.random() < 0.03 else rng.choice(CITIES),
                    "NA" if rng.random() < 0.05 else f"{rng.uniform(-500, 5000):.2f}",
                    "" if rng.random() < 0.02 else rng.randint(0, 1000),
                    "null" if rng.random() < 0.04 else f"{rng.gauss(50, 15):.3f}",
                    "" if rng.random() < 0.10 else " ".join(rng.choices(WORDS, k=4)),
                ]
            )
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class JobSpec:
    """One job to submit; `cancel` asks for a cancel right after it is accepted."""

    kind: str
    payload: dict[str, Any]
    cancel: bool = False


@dataclass(frozen=True)
class Mix:
    """How many jobs of each sort the workload submits."""

    webhooks: int = 500
    gone: int = 12
    csv_summaries: int = 12
    flaky: int = 8
    flaky_exhausted: int = 2
    cancelled: int = 3
    # Django @task functions of the example app (example/tasks.py), run as jobs.
    tasks: int = 8

    @property
    def total(self) -> int:
        return (
            self.webhooks
            + self.gone
            + self.csv_summaries
            + self.flaky
            + self.flaky_exhausted
            + self.cancelled
            + self.tasks
        )


# The receiver's /flaky answers a share FAIL_SHARE of deliveries with 5xx and a share
# SLOW_SHARE after SLOW_SECONDS, past the webhooks' READ_TIMEOUT: those fail too.
FAIL_SHARE, SLOW_SHARE, SLOW_SECONDS, READ_TIMEOUT = 0.2, 0.1, 2.0, 1.0
# The example app's Django task the workload runs (example/tasks.py).
TASK_KIND = "example.tasks.slugify_titles"
# How often the jobs meant to die exhausted fail: more than any policy's max_attempts.
EXHAUSTED_FAIL_TIMES = 50


def plan_jobs(*, receiver_url: Callable[[str], str], csv_path: Path, mix: Mix) -> list[JobSpec]:
    """The jobs to submit, shuffled (seeded) so kinds interleave on the queue.

    Webhooks go to the receiver's /flaky (20% 5xx, 10% answered after 2 s
    against a 1 s read timeout: about 30% of deliveries fail) and /gone (410).
    """
    flaky_url = receiver_url(
        f"/flaky?fail={FAIL_SHARE}&slow={SLOW_SHARE}&slow_seconds={SLOW_SECONDS:g}"
    )
    timeouts = {"connect_timeout": 1.0, "read_timeout": READ_TIMEOUT}
    specs = [
        JobSpec(
            "webhook.deliver",
            {"url": flaky_url, "body": {"event": "demo.delivery", "n": n}, **timeouts},
        )
        for n in range(mix.webhooks)
    ]
    specs += [
        JobSpec("webhook.deliver", {"url": receiver_url("/gone"), "body": {"n": n}, **timeouts})
        for n in range(mix.gone)
    ]
    specs += [
        JobSpec("report.csv_summary", {"source": str(csv_path), "distinct_cap": 500 + n})
        for n in range(mix.csv_summaries)
    ]
    specs += [JobSpec("demo.flaky", {"fail_times": n % 4}) for n in range(mix.flaky)]
    # Fail more often than max_attempts allows: dead, reason "exhausted".
    specs += [
        JobSpec("demo.flaky", {"fail_times": EXHAUSTED_FAIL_TIMES})
        for _ in range(mix.flaky_exhausted)
    ]
    # Slow and failing, cancelled as soon as accepted: they cannot finish first.
    specs += [
        JobSpec(
            "demo.flaky", {"fail_times": EXHAUSTED_FAIL_TIMES, "sleep_seconds": 1.0}, cancel=True
        )
        for _ in range(mix.cancelled)
    ]
    # A Django task (jobs.taskbackend) submitted over HTTP like any kind: its payload
    # is the call's arguments.
    specs += [
        JobSpec(
            TASK_KIND, {"args": [], "kwargs": {"titles": [f"Demo title {n}", "Bring your own"]}}
        )
        for n in range(mix.tasks)
    ]
    random.Random(11).shuffle(specs)
    return specs


class SubmitError(RuntimeError):
    """The API refused a submission for good (not backpressure)."""


class ApiClient:
    """The jobs API at `base_url` (e.g. http://127.0.0.1:8000), with token auth."""

    def __init__(self, base_url: str, token: str, *, timeout: float = 30) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._local = threading.local()
        self._token = token

    @property
    def _session(self) -> requests.Session:
        # One Session per thread: requests.Session is not documented thread-safe.
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.headers["Authorization"] = f"Token {self._token}"
            self._local.session = session
        return session

    def submit(self, spec: JobSpec, *, deadline: float) -> str:
        """POST one job; returns its id. Honours 503 Retry-After until `deadline` (monotonic).

        The Idempotency-Key makes a resent POST return the same job. Raises
        SubmitError for any other refusal, TimeoutError past the deadline.
        """
        body = {"kind": spec.kind, "payload": spec.payload}
        headers = {"Idempotency-Key": f"demo-{uuid.uuid4()}"}
        while True:
            try:
                response = self._session.post(
                    f"{self.base_url}/api/jobs/", json=body, headers=headers, timeout=self.timeout
                )
            except requests.ConnectionError:
                response = None
            if response is not None and response.status_code in (200, 202):
                return response.json()["id"]
            if response is not None and response.status_code != 503:
                raise SubmitError(f"POST /api/jobs/ -> {response.status_code}: {response.text}")
            wait = float(response.headers.get("Retry-After", 1)) if response is not None else 1.0
            if time.monotonic() + wait > deadline:
                raise TimeoutError("the API kept refusing submissions until the deadline")
            time.sleep(wait)

    def cancel(self, job_id: str) -> bool:
        """POST /api/jobs/{id}/cancel/; True when cancelled, False when already terminal (409)."""
        response = self._session.post(
            f"{self.base_url}/api/jobs/{job_id}/cancel/", timeout=self.timeout
        )
        if response.status_code == 409:
            return False
        response.raise_for_status()
        return True

    def count(self, status: str) -> int:
        """How many jobs have `status` (the list endpoint's `count`)."""
        response = self._session.get(
            f"{self.base_url}/api/jobs/", params={"status": status}, timeout=self.timeout
        )
        response.raise_for_status()
        return int(response.json()["count"])

    def counts(self) -> dict[str, int]:
        """{status: number of jobs} for every status."""
        return {status: self.count(status) for status in (*TERMINAL, *ACTIVE)}

    def list_all(self) -> Iterable[dict[str, Any]]:
        """Every job (list representation), following the pagination links."""
        url: str | None = f"{self.base_url}/api/jobs/"
        while url:
            response = self._session.get(url, timeout=self.timeout)
            response.raise_for_status()
            page = response.json()
            yield from page["results"]
            url = page.get("next")


@dataclass
class Submitted:
    """Outcome of the submission phase."""

    ids: list[str] = field(default_factory=list)
    cancel_requested: int = 0
    cancel_refused: int = 0


def submit_all(
    client: ApiClient,
    specs: list[JobSpec],
    *,
    deadline: float,
    threads: int = 8,
    on_submitted: Callable[[], None] = lambda: None,
) -> Submitted:
    """Submit every spec with `threads` concurrent clients; cancel those marked `cancel`.

    Raises SubmitError / TimeoutError from the first submission that fails.
    """
    result = Submitted()
    lock = threading.Lock()

    def one(spec: JobSpec) -> None:
        job_id = client.submit(spec, deadline=deadline)
        cancelled = client.cancel(job_id) if spec.cancel else None
        with lock:
            result.ids.append(job_id)
            if cancelled is not None:
                result.cancel_requested += 1
                result.cancel_refused += not cancelled
        on_submitted()

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="submit") as pool:
        for future in [pool.submit(one, spec) for spec in specs]:
            future.result()
    return result


class PeakRss:
    """Samples the RSS of process `pid` and its descendants every `interval` s; keeps the peak.

    `first_bytes` and `peak_bytes` are None until a sample succeeded. Use as a
    context manager.
    """

    def __init__(self, pid: int | None, *, interval: float = 0.25) -> None:
        self.pid = pid
        self.interval = interval
        self.first_bytes: int | None = None
        self.peak_bytes: int | None = None
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while self.pid and not self._stop.is_set():
            try:
                value = tree_rss_bytes(self.pid)
            except psutil.Error:
                return  # the worker is gone; keep what was seen
            self.samples += 1
            if self.first_bytes is None:
                self.first_bytes = value
            self.peak_bytes = max(self.peak_bytes or 0, value)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def wait_settled(
    client: ApiClient,
    ids: list[str],
    *,
    baseline: dict[str, int],
    deadline: float,
    interval: float = 1.0,
    on_progress: Callable[[int, dict[str, int]], None] = lambda done, counts: None,
) -> list[dict[str, Any]]:
    """Poll until every job in `ids` is terminal or `deadline` (monotonic) passes.

    Progress is the growth of the terminal counts over `baseline` (counts
    before submission); the final check reads each job. Returns the jobs'
    list representations (some possibly non-terminal if the deadline hit).
    """
    wanted = set(ids)
    while True:
        counts = client.counts()
        done = sum(counts[s] - baseline.get(s, 0) for s in TERMINAL)
        on_progress(min(done, len(wanted)), counts)
        if done >= len(wanted) or time.monotonic() > deadline:
            jobs = [job for job in client.list_all() if job["id"] in wanted]
            if all(job["status"] in TERMINAL for job in jobs) or time.monotonic() > deadline:
                return jobs
        time.sleep(interval)


def _seconds(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile (0-100, linear interpolation), or None without values."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q) - 1]


@dataclass(frozen=True)
class Stats:
    """Numbers of one group of jobs. Seconds are end-to-end (created -> finished)."""

    submitted: int
    statuses: Counter
    dead_reasons: Counter
    attempts: int
    retries: int
    p50_seconds: float | None
    p95_seconds: float | None
    # Jobs whose attempt reported progress (AttemptContext.progress): the API's `progress`.
    with_progress: int = 0

    @property
    def unsettled(self) -> int:
        return sum(n for status, n in self.statuses.items() if status not in TERMINAL)


def job_stats(jobs: list[dict[str, Any]], *, submitted: int) -> Stats:
    """Stats of `jobs` (list representations from the API)."""
    durations = [
        d
        for job in jobs
        if job["status"] in TERMINAL
        and (d := _seconds(job["created_at"], job["finished_at"])) is not None
    ]
    return Stats(
        submitted=submitted,
        statuses=Counter(job["status"] for job in jobs),
        dead_reasons=Counter(job["dead_reason"] for job in jobs if job["status"] == "dead"),
        attempts=sum(job["attempts_made"] for job in jobs),
        retries=sum(max(job["attempts_made"] - 1, 0) for job in jobs),
        p50_seconds=percentile(durations, 50),
        p95_seconds=percentile(durations, 95),
        with_progress=sum(1 for job in jobs if job.get("progress")),
    )
