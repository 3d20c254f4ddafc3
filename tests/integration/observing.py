"""A platform watched by Debian's Prometheus and Alertmanager, for the live alert and dashboard tests.

`observed_platform` builds, for one test module: a platform (harness.py:
web, worker, scheduler on real Redis and PostgreSQL) plus Flower; an
Alertmanager with the shipped route whose webhook is an `AlertSink`; and a
Prometheus with platform/prometheus/prometheus.yml rendered for the
platform's localhost ports, scraping and evaluating `rules` every second.
Everything is stopped by pid when the generator closes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from devstack.alertmanager import AlertmanagerServer, AlertSink
from devstack.prometheus import PrometheusServer
from devstack.services import free_port, wait_for
from tests.integration.harness import TERMINAL, Platform, PlatformFactory, require_postgres
from tests.ops.tools import require_binary

FLOWER_AUTH = ("ops", "secret")
# Alertmanager groups and sends at once in tests (the shipped file waits 30 s).
FAST_ROUTE = {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"}


@dataclass
class Observed:
    """A platform with the Prometheus and Alertmanager watching it."""

    platform: Platform
    prometheus: PrometheusServer
    sink: AlertSink
    flower_url: str  # Flower under its URL prefix, e.g. http://127.0.0.1:5555/flower


def host_port(url: str) -> str:
    """ "127.0.0.1:8000" of "http://127.0.0.1:8000/metrics"."""
    return url.removeprefix("http://").split("/", 1)[0]


def observed_platform(
    *, logroot: Path, workdir: Path, name: str, env: dict[str, str], rules: Path
) -> Iterator[Observed]:
    """Yield an Observed platform (use as a module-scoped fixture's body); stops all after.

    Skips when Prometheus or Alertmanager is missing and cannot be installed.
    """
    for binary in ("prometheus", "prometheus-alertmanager"):
        require_binary(binary)
    require_postgres()
    factory = PlatformFactory(logroot=logroot)
    sink = AlertSink().start()
    try:
        platform = factory(name, env=env)
        flower_port = free_port()
        flower = platform.stack.start(
            "flower",
            "--address=127.0.0.1",
            f"--port={flower_port}",
            env={
                "FLOWER_BASIC_AUTH": ":".join(FLOWER_AUTH),
                "FLOWER_DB": str(workdir / "flower.db"),
                # As compose and `make up` run it (prometheus.yml scrapes /flower/metrics).
                "FLOWER_URL_PREFIX": "flower",
            },
        )
        flower_url = f"http://127.0.0.1:{flower_port}/flower"

        def flower_up() -> bool:
            if not flower.alive():
                raise RuntimeError(f"flower exited early:\n{flower.log()[-3000:]}")
            return answers(f"{flower_url}/healthcheck")

        wait_for(flower_up, timeout=60, what="flower")
        alertmanager = AlertmanagerServer(webhook_url=sink.url, timings=FAST_ROUTE)
        factory.exits.callback(alertmanager.stop)
        alertmanager.start()
        prometheus = PrometheusServer(
            {
                "celery": [
                    (host_port(platform.base_url), {"component": "web"}),
                    (host_port(platform.worker_metrics_url), {"component": "worker"}),
                    (host_port(platform.scheduler_metrics_url), {"component": "scheduler"}),
                ],
                "flower": [(host_port(flower_url), {})],
            },
            rule_files=[rules],
            scrape_interval="1s",
            evaluation_interval="1s",
            alertmanagers=[alertmanager.address],
        )
        factory.exits.callback(prometheus.stop)
        prometheus.start()
        yield Observed(platform, prometheus, sink, flower_url)
    finally:
        factory.close()
        sink.stop()


def answers(url: str) -> bool:
    """Whether GET `url` answers 200 within 2 s."""
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def firing(prometheus: PrometheusServer) -> list[dict[str, Any]]:
    """The alerts Prometheus reports as firing now."""
    return [a for a in prometheus.alerts() if a["state"] == "firing"]


def wait_terminal(platform: Platform, job_ids: list[str], *, timeout: float) -> None:
    """Wait until every job of `job_ids` is terminal (read in the database)."""

    def all_terminal() -> bool:
        open_jobs = platform.scalar(
            "SELECT count(*) FROM jobs_job WHERE id::text = ANY(%s) AND NOT status = ANY(%s)",
            (job_ids, sorted(TERMINAL)),
        )
        return open_jobs == 0

    try:
        wait_for(all_terminal, timeout=timeout, interval=0.25, what="jobs to finish")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{platform.log_tails()}") from None
