"""A real Prometheus (Debian's binary) scraping local processes with the shipped jobs and rules.

Used by `make observe` and by the tests (the alert and dashboard checks,
issue 7's acceptance):

    server = PrometheusServer(
        {"celery": [("127.0.0.1:8000", {"component": "web"}),
                    ("127.0.0.1:9808", {"component": "worker"})]},
        rule_files=[SHIPPED_RULES], scrape_interval="1s", evaluation_interval="1s",
    ).start()
    try:
        server.wait_for_query('up{job="celery"} == 1', lambda r: len(r) == 2, timeout=30)
        server.alerts()
    finally:
        server.stop()

The configuration is `platform/prometheus/prometheus.yml` rendered for the
given targets (`render_config`): its scrape jobs keep their names and
settings, only their targets change; jobs not named in
`targets_by_job` are left out. Storage is a temporary directory, removed by
`stop()`; the process is started and stopped by pid.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
import yaml

from devstack.debian import ensure_binary
from devstack.prometheus_config import (  # noqa: F401 - re-exported: one import for users
    SHIPPED_CONFIG,
    SHIPPED_RULES,
    Target,
    render_config,
    write_rules,
)
from devstack.services import free_port, start_daemon, stop_process, wait_for


class PrometheusError(RuntimeError):
    """Prometheus did not start, or answered a query with an error."""


@dataclass
class PrometheusServer:
    """Debian's `prometheus` on 127.0.0.1:`port` (0: a free one) with `render_config`'s config.

    `alertmanagers`: ["127.0.0.1:9093", ...] to send alerts to.
    `workdir` (default: a temporary directory removed by `stop()`) holds the
    rendered config, storage and `prometheus.log`.
    """

    targets_by_job: dict[str, list[Target]]
    rule_files: list[Path] = field(default_factory=lambda: [SHIPPED_RULES])
    scrape_interval: str = "1s"
    evaluation_interval: str = "1s"
    base_config: Path = SHIPPED_CONFIG
    alertmanagers: list[str] = field(default_factory=list)
    port: int = 0
    workdir: Path | None = None
    process: subprocess.Popen | None = None
    _own_workdir: bool = False

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:9090."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def log_path(self) -> Path:
        assert self.workdir is not None, "not started"
        return self.workdir / "prometheus.log"

    def log(self) -> str:
        """Prometheus's log so far ('' before start)."""
        try:
            return self.log_path.read_text(errors="replace")
        except (AssertionError, FileNotFoundError):
            return ""

    def start(self, *, timeout: float = 60) -> PrometheusServer:
        """Render the config, start the binary, return once /-/ready answers 200.

        Raises MissingBinary (devstack.debian) when Prometheus is absent and
        cannot be installed, PrometheusError when it exits or is not ready
        within `timeout` seconds (the message carries its log).
        """
        binary = ensure_binary("prometheus")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="jobs-prometheus-"))
            self._own_workdir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        config = render_config(
            targets_by_job=self.targets_by_job,
            rule_files=self.rule_files,
            scrape_interval=self.scrape_interval,
            evaluation_interval=self.evaluation_interval,
            base=self.base_config,
            alertmanagers=self.alertmanagers,
        )
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.process = start_daemon(
            [
                binary,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            log_path=self.log_path,
            ready_url=f"{self.url}/-/ready",
            timeout=timeout,
            what="prometheus",
            error=PrometheusError,
            on_failure=self.stop,
        )
        return self

    # -- HTTP API ---------------------------------------------------------------
    def api(self, path: str, **params: Any) -> Any:
        """`data` of GET /api/v1/`path`; raises PrometheusError for an error answer."""
        response = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        try:
            body = response.json()
        except ValueError:
            raise PrometheusError(
                f"{path}: HTTP {response.status_code}: {response.text[:500]}"
            ) from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query: [{"metric": {labels}, "value": [unix time, "value"]}].

        A scalar or string result comes back as one element with no labels.
        Raises PrometheusError for an invalid expression.
        """
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts: [{"labels", "annotations", "state" (pending|firing), "activeAt", "value"}]."""
        return self.api("alerts")["alerts"]

    def rule_groups(self) -> list[dict[str, Any]]:
        """Loaded rule groups with each rule's health and state (GET /api/v1/rules)."""
        return self.api("rules")["groups"]

    def targets(self) -> list[dict[str, Any]]:
        """Active scrape targets, each with `labels`, `health` and `lastError`."""
        return self.api("targets")["activeTargets"]

    def metric_names(self) -> set[str]:
        """Every metric name Prometheus holds (scraped or recorded)."""
        return set(self.api("label/__name__/values"))

    def wait_for_query(
        self,
        expr: str,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
        *,
        timeout: float = 30,
        interval: float = 0.25,
    ) -> list[dict[str, Any]]:
        """Query `expr` until `predicate(result)` holds (default: non-empty); return that result.

        Raises TimeoutError (with the last result) after `timeout` seconds.
        """
        last: list[list[dict[str, Any]]] = [[]]

        def check() -> bool:
            last[0] = self.query(expr)
            return predicate(last[0])

        try:
            wait_for(check, timeout=timeout, interval=interval, what=f"query {expr!r}")
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last result: {last[0]}") from None
        return last[0]

    def wait_for_alert(
        self, name: str, *, state: str = "firing", timeout: float = 60
    ) -> dict[str, Any]:
        """Poll /api/v1/alerts until alert `name` is in `state`; return it. Raises TimeoutError."""

        def check() -> dict[str, Any] | None:
            for alert in self.alerts():
                if alert["labels"].get("alertname") == name and alert["state"] == state:
                    return alert
            return None

        return wait_for(check, timeout=timeout, interval=0.25, what=f"alert {name} {state}")

    def evaluated_after(self, moment: float) -> bool:
        """Whether every rule group (at least one) was last evaluated after unix time `moment`."""
        groups = self.rule_groups()
        return bool(groups) and all(
            unix_time(group.get("lastEvaluation", "")) > moment for group in groups
        )

    def wait_evaluated_after(self, moment: float, *, timeout: float = 30) -> None:
        """Wait until every rule group has been evaluated after unix time `moment`."""
        wait_for(
            lambda: self.evaluated_after(moment),
            timeout=timeout,
            interval=0.2,
            what="rule evaluation",
        )

    # -- lifecycle ----------------------------------------------------------------
    def stop(self, *, timeout: float = 10) -> None:
        """Stop the process by pid (SIGTERM, SIGKILL after `timeout` s); remove an own workdir."""
        stop_process(self.process, timeout=timeout)
        self.process = None
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None
            self._own_workdir = False

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def unix_time(timestamp: str) -> float:
    """Unix time of an RFC 3339 timestamp from the API; 0 for an unset one ("0001-01-01...")."""
    if not timestamp or timestamp.startswith("0001-"):
        return 0.0
    return datetime.fromisoformat(timestamp).timestamp()
