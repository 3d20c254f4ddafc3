"""The PromQL of the Grafana files: every dashboard panel target and every Grafana alert query."""

from __future__ import annotations

import json
import re

import yaml

from tests.ops.tools import PLATFORM

GRAFANA = PLATFORM / "grafana"


def dashboard_queries() -> list[tuple[str, str]]:
    """[("<dashboard uid> / <panel title> / <refId>", expr)] of every panel target."""
    queries = []
    for path in sorted((GRAFANA / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                where = f"{dashboard['uid']} / {panel['title']} / {target['refId']}"
                queries.append((where, target["expr"]))
    return queries


def alert_queries() -> list[tuple[str, str]]:
    """[("grafana alert <title>", expr)] of every Prometheus query of the Grafana alert rules."""
    document = yaml.safe_load(
        (GRAFANA / "provisioning" / "alerting" / "alert-rules.yml").read_text()
    )
    return [
        (f"grafana alert {rule['title']}", data["model"]["expr"])
        for group in document["groups"]
        for rule in group["rules"]
        for data in rule["data"]
        if data["datasourceUid"] == "prometheus"
    ]


def substitute(expr: str, intervals: dict[str, str], *, all_value: str = ".*") -> str:
    """`expr` as Grafana would send it: interval variables replaced, other variables matching all.

    `intervals`: {"$__rate_interval": "2m", ...}; any other `$name` (a
    template variable left at "All") becomes `all_value`.
    """
    for variable, value in sorted(intervals.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(variable, value)
    return re.sub(r"\$\{?[A-Za-z_]\w*\}?", all_value, expr)
