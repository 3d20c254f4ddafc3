"""The Prometheus configuration and rule files of platform/prometheus/, rendered for local runs.

`render_config` turns the shipped prometheus.yml into one that scrapes given
localhost targets under the same job names; `write_rules` copies alerts.yml
with some thresholds and every alert's `for` changed (tests). Used by
devstack.prometheus.PrometheusServer.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_CONFIG = ROOT / "platform" / "prometheus" / "prometheus.yml"
SHIPPED_RULES = ROOT / "platform" / "prometheus" / "alerts.yml"
# Service-discovery keys of a scrape job that rendering replaces with static targets.
_DISCOVERY_KEYS = ("static_configs", "dns_sd_configs", "file_sd_configs", "docker_sd_configs")

# ("127.0.0.1:8000", {"component": "web"}): an address and the labels its series get.
Target = tuple[str, dict[str, str]]


def render_config(
    *,
    targets_by_job: dict[str, list[Target]],
    rule_files: list[Path],
    scrape_interval: str,
    evaluation_interval: str,
    base: Path = SHIPPED_CONFIG,
    alertmanagers: list[str] | None = None,
) -> dict[str, Any]:
    """The Prometheus configuration (a dict) of `base` rendered for local targets.

    `targets_by_job`: {job name: [(host:port, labels)]}; a job of `base` keeps
    its other settings (metrics path, ...) and gets these targets; a job
    absent from `base` is added with defaults. `alertmanagers`: host:port of
    each Alertmanager (none: no alerting section). Intervals are Prometheus
    durations ("1s", "15s"). Raises OSError/yaml.YAMLError for an unreadable `base`.
    """
    config = yaml.safe_load(base.read_text())
    shipped = {job["job_name"]: job for job in config.get("scrape_configs", [])}
    jobs = []
    for name, targets in targets_by_job.items():
        job = copy.deepcopy(shipped.get(name, {"job_name": name}))
        for key in (*_DISCOVERY_KEYS, "scrape_interval", "scrape_timeout"):
            job.pop(key, None)
        job["static_configs"] = [
            {"targets": [address], "labels": dict(labels)} for address, labels in targets
        ]
        jobs.append(job)
    config["global"] = {
        **config.get("global", {}),
        "scrape_interval": scrape_interval,
        "scrape_timeout": scrape_interval,
        "evaluation_interval": evaluation_interval,
    }
    config["scrape_configs"] = jobs
    config["rule_files"] = [str(Path(path).resolve()) for path in rule_files]
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": alertmanagers}]}]}
    else:
        config.pop("alerting", None)
    return config


def write_rules(
    destination: Path,
    *,
    source: Path = SHIPPED_RULES,
    thresholds: dict[str, float] | None = None,
    alert_for: str | None = None,
) -> Path:
    """Write a copy of rule file `source` with some thresholds and every alert's `for` changed.

    `thresholds`: {name: value} for the `jobs:threshold:<name>` records (see
    alerts.yml); `alert_for`: a Prometheus duration for every alert ("2s" in
    tests). Returns `destination`. Raises KeyError for an unknown threshold.
    """
    document = yaml.safe_load(source.read_text())
    wanted = {f"jobs:threshold:{name}": value for name, value in (thresholds or {}).items()}
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("record") in wanted:
                rule["expr"] = f"vector({wanted.pop(rule['record'])})"
            if "alert" in rule and alert_for is not None:
                rule["for"] = alert_for
    if wanted:
        raise KeyError(f"no such thresholds in {source}: {sorted(wanted)}")
    destination.write_text(yaml.safe_dump(document, sort_keys=False))
    return destination
