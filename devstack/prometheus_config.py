"""The Prometheus configuration and rule files of platform/prometheus/, rendered for local runs.

`render_config` turns the shipped prometheus.yml into one that scrapes given
localhost targets under the same job names; `write_rules` copies alerts.yml
with some thresholds and every alert's `for` changed (tests). Used by
devstack.prometheus.PrometheusServer.
"""

from __future__ import annotations

import copy
import re
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


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def duration_seconds(duration: str) -> float:
    """Seconds of a Prometheus duration ("1m", "90s", "1h30m", "500ms"). Raises ValueError."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"not a Prometheus duration: {duration!r}")
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)


def write_rules(
    destination: Path,
    *,
    source: Path = SHIPPED_RULES,
    thresholds: dict[str, float] | None = None,
    alert_for: str | None = None,
    for_scale: float | None = None,
    keep_for_in: tuple[str, ...] = (),
) -> Path:
    """Write a copy of rule file `source` with some thresholds and every alert's `for` changed.

    `thresholds`: {name: value} for the `jobs:threshold:<name>` records (see
    alerts.yml); `alert_for`: a Prometheus duration for every alert ("2s" in
    tests); `for_scale`: every alert's own `for` multiplied by it, in whole
    milliseconds (0.1 turns "2m" into "12000ms"), expressions untouched: the
    shipped rules on a faster clock; `keep_for_in`: names of groups whose
    alerts keep their shipped `for` whatever `alert_for` says. Returns
    `destination`. Raises KeyError for an unknown threshold or group.
    """
    document = yaml.safe_load(source.read_text())
    wanted = {f"jobs:threshold:{name}": value for name, value in (thresholds or {}).items()}
    unknown_groups = set(keep_for_in) - {group["name"] for group in document["groups"]}
    if unknown_groups:
        raise KeyError(f"no such rule groups in {source}: {sorted(unknown_groups)}")
    for group in document["groups"]:
        for rule in group["rules"]:
            if rule.get("record") in wanted:
                rule["expr"] = f"vector({wanted.pop(rule['record'])})"
            if "alert" not in rule or group["name"] in keep_for_in:
                continue
            if alert_for is not None:
                rule["for"] = alert_for
            elif for_scale is not None and "for" in rule:
                scaled = duration_seconds(rule["for"]) * for_scale
                rule["for"] = f"{round(scaled * 1000)}ms"
    if wanted:
        raise KeyError(f"no such thresholds in {source}: {sorted(wanted)}")
    destination.write_text(yaml.safe_dump(document, sort_keys=False))
    return destination
