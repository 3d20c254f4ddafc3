"""`manage.py jobs_demo`: submit the demo workload over HTTP, wait for it, print the table.

Thin: the workload lives in devstack.workload. `make demo` starts the stack
and runs this against it; it also works against `make up`:

    python manage.py jobs_demo --api-url http://127.0.0.1:8000 --token <token>

Exits 0 only when every submitted job reached a terminal state and
submitted == succeeded + dead + cancelled; otherwise one line on stderr, exit 1.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import requests
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from devstack import workload_notes
from devstack.receiver import WebhookReceiver
from devstack.workload import (
    ACTIVE,
    TASK_KIND,
    ApiClient,
    JobSpec,
    Mix,
    PeakRss,
    Stats,
    SubmitError,
    Submitted,
    generate_csv,
    job_stats,
    plan_jobs,
    submit_all,
    wait_settled,
)
from jobs.kinds import policy_for

# The last is a Django @task of the example app (jobs.taskbackend): its dotted path is its kind.
KINDS = ("webhook.deliver", "report.csv_summary", "demo.flaky", TASK_KIND)


class Command(BaseCommand):
    help = "Submit the demo workload (500+ jobs) over the HTTP API and report how it settled."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--api-url", required=True, help="web base URL, e.g. http://127.0.0.1:8000"
        )
        parser.add_argument("--token", required=True, help="DRF token of a user")
        parser.add_argument("--worker-pid", type=int, default=None, help="sample this worker's RSS")
        parser.add_argument("--webhooks", type=int, default=Mix.webhooks)
        parser.add_argument("--csv-jobs", type=int, default=Mix.csv_summaries)
        parser.add_argument("--csv-mb", type=float, default=5.0, help="size of the generated CSV")
        parser.add_argument("--deadline", type=float, default=480.0, help="seconds for the run")
        parser.add_argument("--threads", type=int, default=8, help="concurrent submitters")

    def handle(self, *args: Any, **options: Any) -> None:
        started = time.monotonic()
        mix = Mix(webhooks=options["webhooks"], csv_summaries=options["csv_jobs"])
        csv_path = generate_csv(
            Path(settings.JOBS_CSV_ROOTS[0]) / f"demo-{options['csv_mb']:g}mb.csv",
            target_bytes=int(options["csv_mb"] * 1024 * 1024),
        )
        client = ApiClient(options["api_url"], options["token"])
        try:
            with WebhookReceiver() as receiver, PeakRss(options["worker_pid"]) as rss:
                submitted, jobs = self._run(
                    client,
                    plan_jobs(receiver_url=receiver.url, csv_path=csv_path, mix=mix),
                    deadline=started + options["deadline"],
                    threads=options["threads"],
                )
                deliveries = len(receiver.deliveries)
        except (requests.RequestException, SubmitError, TimeoutError) as exc:
            raise CommandError(f"workload failed: {exc}") from exc
        elapsed = time.monotonic() - started

        total = job_stats(jobs, submitted=len(submitted.ids))
        by_kind = {
            kind: job_stats(
                [j for j in jobs if j["kind"] == kind],
                submitted=sum(j["kind"] == kind for j in jobs),
            )
            for kind in KINDS
        }
        self.stdout.write(
            f"\njobs demo: {total.submitted} jobs submitted to {options['api_url']}/api/jobs/, "
            f"settled in {elapsed:.1f} s; CSV {csv_path.stat().st_size / 2**20:.1f} MiB; "
            f"{deliveries} webhook requests received\n"
            "policy overrides (JOBS_KIND_OVERRIDES): "
            f"{json.dumps(settings.JOBS_KIND_OVERRIDES, sort_keys=True)}\n"
            "end-to-end = finished_at - created_at of terminal jobs; "
            f"worker RSS = main + children, {rss.samples} samples every {rss.interval:g} s\n"
        )
        self.stdout.write(render_table(total, by_kind, rss=rss))
        budget = workload_notes.Budget(
            window=settings.JOBS_RETRY_BUDGET_WINDOW,
            ratio=settings.JOBS_RETRY_BUDGET_RATIO,
            floor=settings.JOBS_RETRY_BUDGET_FLOOR,
            max_deferral=settings.JOBS_RETRY_BUDGET_MAX_DEFERRAL,
        )
        self.stdout.write(
            workload_notes.on_purpose(
                mix,
                budget=budget,
                webhook_attempts=policy_for("webhook.deliver").max_attempts,
                flaky_attempts=policy_for("demo.flaky").max_attempts,
            )
            + "\n"
            + workload_notes.dead_reasons(
                {kind: stats.dead_reasons for kind, stats in by_kind.items()}, mix, budget=budget
            )
            + "\n"
        )

        settled = total.statuses["succeeded"] + total.statuses["dead"] + total.statuses["cancelled"]
        if total.unsettled or settled != total.submitted:
            raise CommandError(
                f"not settled: {total.unsettled} of {total.submitted} jobs still non-terminal, "
                f"{total.submitted - sum(total.statuses.values())} missing, by the deadline"
            )
        if submitted.cancel_refused:
            raise CommandError(f"{submitted.cancel_refused} cancel requests were refused")

    def _run(
        self, client: ApiClient, specs: list[JobSpec], *, deadline: float, threads: int
    ) -> tuple[Submitted, list[dict[str, Any]]]:
        """Submit `specs` and wait (until `deadline`, monotonic) with progress bars."""
        baseline = client.counts()
        with tqdm(total=len(specs), desc="submitting", unit="job", mininterval=0.5) as bar:
            submitted = submit_all(
                client,
                specs,
                deadline=deadline,
                threads=threads,
                on_submitted=lambda: bar.update(1),
            )
        with tqdm(total=len(submitted.ids), desc="settling  ", unit="job") as bar:

            def progress(done: int, counts: dict[str, int]) -> None:
                bar.n = done
                bar.set_postfix({s: counts[s] for s in ACTIVE}, refresh=True)

            jobs = wait_settled(
                client, submitted.ids, baseline=baseline, deadline=deadline, on_progress=progress
            )
        return submitted, jobs


def render_table(total: Stats, by_kind: dict[str, Stats], *, rss: PeakRss) -> str:
    """A plain-text table: one row per measure, a column for all jobs and one per kind."""
    reasons = sorted({"error", "exhausted", *total.dead_reasons})

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    def mib(value: int | None) -> str:
        return "-" if value is None else f"{value / 2**20:.1f}"

    def row(label: str, pick: Any) -> list[str]:
        return [label, str(pick(total)), *(str(pick(s)) for s in by_kind.values())]

    rows = [
        ["", "all", *by_kind],
        row("submitted", lambda s: s.submitted),
        row("succeeded", lambda s: s.statuses["succeeded"]),
        *(row(f"dead: {r}", lambda s, r=r: s.dead_reasons[r]) for r in reasons),
        row("cancelled", lambda s: s.statuses["cancelled"]),
        row("not terminal", lambda s: s.unsettled),
        row("attempts", lambda s: s.attempts),
        row("retries", lambda s: s.retries),
        row("reported progress", lambda s: s.with_progress),
        row("end-to-end p50 (s)", lambda s: seconds(s.p50_seconds)),
        row("end-to-end p95 (s)", lambda s: seconds(s.p95_seconds)),
        ["worker RSS at start (MiB)", mib(rss.first_bytes), *("" for _ in by_kind)],
        ["peak worker RSS (MiB)", mib(rss.peak_bytes), *("" for _ in by_kind)],
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule]
    for index, cells in enumerate(rows):
        padded = [cells[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)
        ]
        lines.append("| " + " | ".join(padded) + " |")
        if index == 0:
            lines.append(rule)
    lines.append(rule)
    return "\n".join(lines) + "\n"
