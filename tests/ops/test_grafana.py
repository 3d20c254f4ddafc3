"""platform/grafana/: dashboards valid for provisioning, data sources by uid, alerts in step with Prometheus.

Issue 9, Acceptance: "Dashboard JSON is valid for Grafana provisioning (uid,
schemaVersion, data sources by uid), checked by a test." Grafana itself is
not available here: the dashboards' queries run against a real Prometheus
in tests/integration/test_observe_live.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from devstack import grafana_alerts
from tests.ops.tools import PLATFORM, ROOT, alert_rules, load_yaml

GRAFANA = PLATFORM / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
# Grafana 11 writes schemaVersion 39; provisioning migrates older ones, never newer.
SCHEMA_VERSIONS = range(36, 40)
# What the issue asks each dashboard to show, by words of its panel titles.
REQUIRED_PANELS = {
    "jobs-overview": [
        "throughput by outcome",
        "retries vs first attempts",
        "queue depth by part",
        "oldest queued job",
        "dead letters",
        "refused submissions",
    ],
    "jobs-worker-memory": [
        "child rss against the limit",
        "rss growth per attempt by kind",
        "threads",
        "recycled by reason",
        "workers lost",
    ],
    "jobs-retry-storms": [
        "retry ratio per kind",
        "retry budget",
        "submission to end",
        "retry delays",
    ],
}


def datasource_uids() -> dict[str, str]:
    """{uid: type} of the provisioned data sources."""
    config = load_yaml(GRAFANA / "provisioning" / "datasources" / "datasources.yml")
    return {ds["uid"]: ds["type"] for ds in config["datasources"]}


def dashboards() -> dict[str, dict]:
    """{uid: dashboard} of every dashboard file."""
    return {d["uid"]: d for d in (json.loads(path.read_text()) for path in DASHBOARDS)}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_valid_for_provisioning(path: Path) -> None:
    text = path.read_text()
    dashboard = json.loads(text)
    sources = datasource_uids()
    assert re.fullmatch(r"[a-z0-9-]{1,40}", dashboard["uid"]), dashboard["uid"]
    assert dashboard["title"]
    assert dashboard["schemaVersion"] in SCHEMA_VERSIONS
    # Exported-for-sharing dashboards carry ${DS_...} inputs that provisioning cannot fill.
    assert "__inputs" not in dashboard
    assert "${DS_" not in text
    assert "id" not in dashboard or dashboard["id"] is None
    panel_ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(panel_ids) == len(set(panel_ids)), "panel ids must be unique"
    for panel in dashboard["panels"]:
        assert panel["type"] in ("timeseries", "stat"), panel["title"]
        assert set(panel["gridPos"]) == {"x", "y", "w", "h"}, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        assert sources.get(panel["datasource"]["uid"]) == panel["datasource"]["type"], panel
        assert panel["targets"], panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert sources.get(target["datasource"]["uid"]) == "prometheus", panel["title"]
    for variable in dashboard["templating"]["list"]:
        assert sources.get(variable["datasource"]["uid"]) == "prometheus", variable["name"]
    for link in dashboard.get("links", []):
        if link["url"].startswith("/d/"):
            assert link["url"].split("/")[2] in dashboards(), link


def test_dashboards_show_what_the_issue_lists() -> None:
    found = dashboards()
    assert set(found) == set(REQUIRED_PANELS)
    for uid, wanted in REQUIRED_PANELS.items():
        titles = " | ".join(panel["title"].lower() for panel in found[uid]["panels"])
        missing = [words for words in wanted if words not in titles]
        assert not missing, f"{uid}: no panel for {missing} (titles: {titles})"


def test_alert_links_point_at_provisioned_dashboards() -> None:
    uids = set(dashboards())
    for rule in alert_rules():
        match = re.search(r"/d/([a-z0-9-]+)", rule["annotations"]["dashboard"])
        assert match is not None, rule["annotations"]["dashboard"]
        assert match.group(1) in uids, (
            f"{rule['alert']} links to unknown dashboard {match.group(1)}"
        )


def test_provisioning_points_at_the_mounted_dashboards_and_real_data_sources() -> None:
    sources = datasource_uids()
    assert sources == {
        "prometheus": "prometheus",
        "jaeger": "jaeger",
        "alertmanager": "alertmanager",
    }
    provider = load_yaml(GRAFANA / "provisioning" / "dashboards" / "dashboards.yml")["providers"][0]
    compose = (ROOT / "docker-compose.yml").read_text()
    assert f"./platform/grafana/dashboards:{provider['options']['path']}:ro" in compose
    config = load_yaml(GRAFANA / "provisioning" / "datasources" / "datasources.yml")
    prometheus = next(ds for ds in config["datasources"] if ds["uid"] == "prometheus")
    destinations = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    assert {d["datasourceUid"] for d in destinations} == {"jaeger"}


def test_grafana_alert_rules_are_generated_from_alerts_yml() -> None:
    # The committed file is exactly what the generator makes of alerts.yml today.
    committed = grafana_alerts.GRAFANA_RULES.read_text()
    assert committed == grafana_alerts.render(), (
        "platform/grafana/provisioning/alerting/alert-rules.yml is stale: "
        "run `python -m devstack grafana-alerts`"
    )


def test_grafana_alert_rules_match_the_prometheus_rules_one_to_one() -> None:
    provisioned = load_yaml(grafana_alerts.GRAFANA_RULES)
    grafana = {rule["title"]: rule for group in provisioned["groups"] for rule in group["rules"]}
    prometheus = {rule["alert"]: rule for rule in alert_rules()}
    assert set(grafana) == set(prometheus)
    sources = set(datasource_uids()) | {"__expr__"}
    uids = [rule["uid"] for rule in grafana.values()]
    assert len(uids) == len(set(uids))
    for name, rule in prometheus.items():
        copy = grafana[name]
        assert copy["for"] == rule.get("for", "0s"), name
        assert copy["labels"] == {**rule["labels"], "evaluator": "grafana"}, name
        (query,) = [d for d in copy["data"] if d["datasourceUid"] == "prometheus"]
        assert "jobs:threshold:" not in query["model"]["expr"], name
        assert copy["condition"] in {d["refId"] for d in copy["data"]}, name
        assert {d["datasourceUid"] for d in copy["data"]} <= sources, name
        for key in ("summary", "description", "runbook_url", "dashboard"):
            assert copy["annotations"][key] == rule["annotations"][key].replace(
                "$value", "$values.B.Value"
            ), (name, key)
