"""devstack.prometheus_config renders the shipped files for local runs without changing their meaning."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devstack.prometheus_config import SHIPPED_CONFIG, SHIPPED_RULES, render_config, write_rules
from tests.ops.tools import require_binary, run


def test_render_config_keeps_job_settings_and_replaces_targets(tmp_path: Path) -> None:
    config = render_config(
        targets_by_job={
            "celery": [("127.0.0.1:8001", {"component": "web"})],
            "extra": [("127.0.0.1:9999", {})],
        },
        rule_files=[SHIPPED_RULES],
        scrape_interval="1s",
        evaluation_interval="2s",
        alertmanagers=["127.0.0.1:9094"],
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    # flower is not asked for, so it is left out; an unknown job gets defaults
    assert set(jobs) == {"celery", "extra"}
    assert jobs["celery"]["metrics_path"] == "/metrics"
    assert jobs["celery"]["static_configs"] == [
        {"targets": ["127.0.0.1:8001"], "labels": {"component": "web"}}
    ]
    assert config["global"]["scrape_interval"] == "1s"
    assert config["global"]["evaluation_interval"] == "2s"
    assert config["rule_files"] == [str(SHIPPED_RULES)]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "127.0.0.1:9094"
    ]
    without = render_config(
        targets_by_job={}, rule_files=[], scrape_interval="1s", evaluation_interval="1s"
    )
    assert "alerting" not in without
    assert yaml.safe_load(SHIPPED_CONFIG.read_text())["scrape_configs"]  # the source is untouched


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_write_rules_changes_only_the_named_thresholds_and_for(tmp_path: Path) -> None:
    path = write_rules(
        tmp_path / "alerts.yml", thresholds={"retry_storm_min_rate": 0.05}, alert_for="2s"
    )
    groups = yaml.safe_load(path.read_text())["groups"]
    rules = {r.get("record") or r["alert"]: r for g in groups for r in g["rules"]}
    assert rules["jobs:threshold:retry_storm_min_rate"]["expr"] == "vector(0.05)"
    assert rules["jobs:threshold:retry_storm_ratio"]["expr"] == "vector(0.5)"
    assert {r["for"] for name, r in rules.items() if "alert" in r} == {"2s"}
    promtool = require_binary("promtool")
    result = run([promtool, "check", "rules", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    with pytest.raises(KeyError, match="no_such"):
        write_rules(tmp_path / "x.yml", thresholds={"no_such": 1})


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_write_rules_scales_every_for_and_keeps_the_named_groups(tmp_path: Path) -> None:
    shipped = {
        r["alert"]: r.get("for")
        for g in yaml.safe_load(SHIPPED_RULES.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    # when every `for` is scaled by 0.1
    scaled = yaml.safe_load(write_rules(tmp_path / "a.yml", for_scale=0.1).read_text())
    fors = {r["alert"]: r.get("for") for g in scaled["groups"] for r in g["rules"] if "alert" in r}
    # then each is a tenth of the shipped one, in milliseconds; none is added
    assert fors["NoWorkerUp"] == "12000ms"
    assert fors["WebDown"] == "6000ms"
    assert all((fors[name] is None) == (shipped[name] is None) for name in shipped), fors
    # and an alert of a group kept with alert_for keeps its shipped `for`
    kept = yaml.safe_load(
        write_rules(
            tmp_path / "b.yml", alert_for="2s", keep_for_in=("jobs-availability",)
        ).read_text()
    )
    fors = {r["alert"]: r.get("for") for g in kept["groups"] for r in g["rules"] if "alert" in r}
    assert fors["WebDown"] == shipped["WebDown"] == "1m"
    assert fors["RetryStorm"] == "2s"
    with pytest.raises(KeyError, match="no-such-group"):
        write_rules(tmp_path / "c.yml", keep_for_in=("no-such-group",))
    promtool = require_binary("promtool")
    for name in ("a.yml", "b.yml"):
        result = run([promtool, "check", "rules", str(tmp_path / name)])
        assert result.returncode == 0, result.stdout + result.stderr
