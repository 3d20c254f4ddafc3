"""Grafana-managed copies of the Prometheus alerts: generated from alerts.yml, so the two never drift.

`python -m devstack grafana-alerts` writes
platform/grafana/provisioning/alerting/alert-rules.yml from
platform/prometheus/alerts.yml; `--check` exits 1 when the committed file
differs (tests/ops/test_grafana.py runs the same comparison).

Each Prometheus alert becomes one Grafana rule on the `prometheus` data
source, in a group of the same name:

- query A is the alert's PromQL with each `scalar(jobs:threshold:NAME)`
  replaced by the threshold's number (Grafana does not evaluate the
  recording rules that hold them), so every series A returns is an alert
  instance, as in Prometheus;
- B keeps A's last value (annotations read it as `$values.B.Value`, where
  Prometheus says `$value`); C is 1 for each of those series: the condition;
- `for`, labels, summary, description, dashboard and runbook links are the
  Prometheus rule's; label `evaluator: grafana` lets Alertmanager tell the
  copies apart (platform/alertmanager/alertmanager.yml drops them by
  default, so each alert pages once).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_RULES = ROOT / "platform" / "prometheus" / "alerts.yml"
GRAFANA_RULES = ROOT / "platform" / "grafana" / "provisioning" / "alerting" / "alert-rules.yml"
DATASOURCE_UID = "prometheus"
FOLDER = "django-jobs"
_THRESHOLD_RECORD = re.compile(r"^jobs:threshold:[a-z0-9_]+$")
_THRESHOLD_USE = re.compile(r"scalar\((jobs:threshold:[a-z0-9_]+)\)")
_VECTOR = re.compile(r"^\s*vector\((?P<value>[-+0-9.eE]+)\)\s*$")
_DASHBOARD_UID = re.compile(r"/d/(?P<uid>[a-z0-9-]+)")
HEADER = (
    "# Generated from platform/prometheus/alerts.yml by `python -m devstack grafana-alerts`;\n"
    "# do not edit (tests/ops/test_grafana.py fails when the two differ).\n"
)


def thresholds(group: dict[str, Any]) -> dict[str, str]:
    """{`jobs:threshold:NAME`: its number as written} of a rule group's threshold records.

    Raises ValueError for a threshold record whose expression is not `vector(<number>)`.
    """
    found = {}
    for rule in group["rules"]:
        if _THRESHOLD_RECORD.match(rule.get("record", "")):
            match = _VECTOR.match(rule["expr"])
            if not match:
                raise ValueError(f"{rule['record']}: expected vector(<number>), got {rule['expr']}")
            found[rule["record"]] = match["value"]
    return found


def inline_thresholds(expr: str, values: dict[str, str]) -> str:
    """`expr` with every `scalar(jobs:threshold:NAME)` replaced by its number.

    Raises KeyError for a threshold not in `values`.
    """
    return _THRESHOLD_USE.sub(lambda m: values[m.group(1)], expr).strip()


def grafana_annotation(text: str) -> str:
    """A Prometheus annotation template for Grafana: `$value` is `$values.B.Value` there."""
    return re.sub(r"\$value\b", "$values.B.Value", text)


def grafana_rule(rule: dict[str, Any], values: dict[str, str]) -> dict[str, Any]:
    """The Grafana-managed rule of one Prometheus alerting rule (see the module docstring)."""
    annotations = {k: grafana_annotation(v) for k, v in rule.get("annotations", {}).items()}
    dashboard = _DASHBOARD_UID.search(annotations.get("dashboard", ""))
    if dashboard:
        annotations["__dashboardUid__"] = dashboard["uid"]
    slug = re.sub(r"(?<!^)(?=[A-Z])", "-", rule["alert"]).lower()
    return {
        "uid": f"jobs-{slug}"[:40],
        "title": rule["alert"],
        "condition": "C",
        "data": [
            {
                "refId": "A",
                "relativeTimeRange": {"from": 900, "to": 0},
                "datasourceUid": DATASOURCE_UID,
                "model": {
                    "refId": "A",
                    "expr": inline_thresholds(rule["expr"], values),
                    "instant": True,
                    "range": False,
                },
            },
            {
                "refId": "B",
                "datasourceUid": "__expr__",
                "model": {
                    "refId": "B",
                    "type": "reduce",
                    "expression": "A",
                    "reducer": "last",
                    "settings": {"mode": "dropNN"},
                },
            },
            {
                "refId": "C",
                "datasourceUid": "__expr__",
                "model": {"refId": "C", "type": "math", "expression": "$B * 0 + 1"},
            },
        ],
        "for": rule.get("for", "0s"),
        "noDataState": "OK",
        "execErrState": "Error",
        "labels": {**rule.get("labels", {}), "evaluator": "grafana"},
        "annotations": annotations,
        "isPaused": False,
    }


def generate(rules_path: Path = PROMETHEUS_RULES) -> dict[str, Any]:
    """Grafana's alert provisioning document for every alert of `rules_path`."""
    groups = []
    for group in yaml.safe_load(rules_path.read_text())["groups"]:
        values = thresholds(group)
        rules = [grafana_rule(rule, values) for rule in group["rules"] if "alert" in rule]
        if rules:
            groups.append(
                {
                    "orgId": 1,
                    "name": group["name"],
                    "folder": FOLDER,
                    "interval": group.get("interval", "1m"),
                    "rules": rules,
                }
            )
    return {"apiVersion": 1, "groups": groups}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as literal blocks, as in alerts.yml."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def render(rules_path: Path = PROMETHEUS_RULES) -> str:
    """The text of alert-rules.yml for `rules_path`."""
    return HEADER + yaml.dump(generate(rules_path), Dumper=_Dumper, sort_keys=False, width=100)


def main(*, check: bool = False) -> int:
    """Write GRAFANA_RULES (or with `check`, compare): 0 when written or equal, 1 when it differs."""
    text = render()
    if check:
        current = GRAFANA_RULES.read_text() if GRAFANA_RULES.exists() else ""
        if current != text:
            print(f"{GRAFANA_RULES} is stale: run `python -m devstack grafana-alerts`")
            return 1
        return 0
    GRAFANA_RULES.write_text(text)
    print(f"wrote {GRAFANA_RULES.relative_to(ROOT)}")
    return 0
