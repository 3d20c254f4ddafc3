"""platform/prometheus/: promtool checks the config and rules and runs the rule unit tests.

Issue 9, Acceptance: "`promtool check config`, `promtool check rules` and
`promtool test rules` pass; every alert has a firing and a silent case."
"""

from __future__ import annotations

import re

import pytest

from tests.ops.tools import PLATFORM, RULE_TESTS, RULES, alert_rules, load_yaml, require_binary, run

REQUIRED_ALERTS = {
    "RetryStorm",
    "RetryBudgetExhausted",
    "RetryBudgetUnavailable",
    "WorkerMemoryNearLimit",
    "WorkerLost",
    "RecycleChurn",
    "QueueBacklog",
    "OldestJobTooOld",
    "DeadLetterGrowing",
    "HighFailureRate",
    "TimeLimitsHit",
    "LeakSuspected",
    "NoWorkerUp",
    "EnqueueRejected",
    # issue 19: the outage matrix, and a slow steady dead-letter trickle
    "TargetDown",
    "WebDown",
    "WorkerDown",
    "SchedulerDown",
    "BrokerDown",
    "DatabaseDown",
    "DeadLetterTrickle",
}
THRESHOLD = re.compile(r"^jobs:threshold:[a-z0-9_]+$")


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_promtool_check_config_and_rules_pass() -> None:
    promtool = require_binary("promtool")
    config = run([promtool, "check", "config", str(PLATFORM / "prometheus" / "prometheus.yml")])
    assert config.returncode == 0, config.stdout + config.stderr
    rules = run([promtool, "check", "rules", str(RULES)])
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS" in rules.stdout


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_promtool_rule_unit_tests_pass() -> None:
    promtool = require_binary("promtool")
    result = run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_alerts_cover_the_issue_list_with_annotations_and_named_thresholds() -> None:
    rules = alert_rules()
    names = {rule["alert"] for rule in rules}
    assert REQUIRED_ALERTS <= names, f"missing alerts: {REQUIRED_ALERTS - names}"
    runbook = (PLATFORM / "README.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in runbook.splitlines()
        if line.startswith("#")
    }
    for rule in rules:
        annotations = rule.get("annotations", {})
        assert {"summary", "description", "dashboard", "runbook_url"} <= set(annotations), rule
        assert rule["labels"]["severity"] in ("warning", "critical"), rule
        anchor = annotations["runbook_url"].partition("#")[2]
        assert annotations["runbook_url"].startswith("platform/README.md#"), rule["alert"]
        assert anchor in anchors, f"{rule['alert']}: no section #{anchor} in platform/README.md"
        assert "/d/jobs-" in annotations["dashboard"], rule["alert"]
    # Thresholds: each group opens with its `jobs:threshold:*` records, read by scalar().
    for group in load_yaml(RULES)["groups"]:
        kinds = ["record" if "record" in rule else "alert" for rule in group["rules"]]
        first_alert = kinds.index("alert")
        assert "record" not in kinds[first_alert:], f"{group['name']}: thresholds after an alert"
        records = [rule["record"] for rule in group["rules"][:first_alert]]
        assert records, f"{group['name']}: no thresholds at the top"
        assert all(THRESHOLD.match(name) for name in records), records
        used = {
            name
            for rule in group["rules"][first_alert:]
            for name in THRESHOLD_USE.findall(rule["expr"])
        }
        assert used <= set(records), f"{group['name']}: thresholds of another group: {used}"
        assert set(records) <= used, f"{group['name']}: unused thresholds {set(records) - used}"


THRESHOLD_USE = re.compile(r"scalar\((jobs:threshold:[a-z0-9_]+)\)")


def test_every_alert_has_a_firing_and_a_silent_promtool_case() -> None:
    cases: dict[str, dict[str, int]] = {}
    for test in load_yaml(RULE_TESTS)["tests"]:
        for case in test.get("alert_rule_test", []):
            kind = "firing" if case.get("exp_alerts") else "silent"
            counts = cases.setdefault(case["alertname"], {"firing": 0, "silent": 0})
            counts[kind] += 1
    for rule in alert_rules():
        counts = cases.get(rule["alert"], {"firing": 0, "silent": 0})
        assert counts["firing"] >= 1, f"{rule['alert']}: no firing case"
        assert counts["silent"] >= 1, f"{rule['alert']}: no silent case"


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_amtool_accepts_the_alertmanager_config_with_a_loopback_default_route() -> None:
    amtool = require_binary("amtool")
    path = PLATFORM / "alertmanager" / "alertmanager.yml"
    result = run([amtool, "check-config", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    config = load_yaml(path)
    default = next(r for r in config["receivers"] if r["name"] == config["route"]["receiver"])
    urls = [hook["url"] for hook in default["webhook_configs"]]
    assert urls, default
    assert all(url.startswith("http://127.0.0.1:") for url in urls), urls
