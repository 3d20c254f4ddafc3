"""The outage matrix over the shipped rules at the shipped timings, with promtool.

Issue 19, item 4: each outage fires exactly the alert named for its cause,
within its `for` plus two scrape intervals (after the heartbeat timeout for
the worker rows), no other alert fires at any time of the run, and every
alert is gone (not even pending) after recovery; a calm run has no alert at
all, not even pending. The series each outage leaves are built by
tests/ops/outage_matrix.py; the same rows are drilled live, with real
processes, in tests/integration/test_outage_matrix.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from devstack.prometheus_config import duration_seconds
from tests.ops.outage_matrix import END, OUTAGE_AT, RECOVER_AT, ROWS, STEP, Row, series_for
from tests.ops.tools import RULES, alert_rules, require_binary, run


def at(t: float) -> str:
    """A promtool eval_time on the evaluation grid (STEP), at or after `t` seconds."""
    return f"{math.ceil(t / STEP) * STEP}s"


def firing_counts(row: Row) -> list[dict]:
    """exp_samples of `count by (alertname) (...)`: the row's alert and its instances."""
    if row.alert is None:
        return []
    return [{"labels": f'{{alertname="{row.alert}"}}', "value": row.instances}]


def promtool_case(row: Row, alert_for: dict[str, float]) -> dict:
    checks = [
        # no other alert fires at any time of the run; for calm, none is even pending
        {
            "expr": "count by (alertname) (max_over_time(ALERTS"
            + ('{alertstate="firing"}' if row.alert else "")
            + f"[{END}s]))",
            "eval_time": f"{END}s",
            "exp_samples": firing_counts(row),
        },
        # everything resolved (not even pending) by the end
        {"expr": "ALERTS", "eval_time": f"{END}s", "exp_samples": []},
        # nothing fires within two scrapes of recovery
        {
            "expr": 'ALERTS{alertstate="firing"}',
            "eval_time": at(RECOVER_AT + 2 * STEP),
            "exp_samples": [],
        },
    ]
    if row.alert is not None:
        # the named alert fires within its `for` plus two scrape intervals
        fires_by = OUTAGE_AT + row.signal_delay + alert_for[row.alert] + 2 * STEP
        checks.append(
            {
                "expr": 'count by (alertname) (ALERTS{alertstate="firing"})',
                "eval_time": at(fires_by),
                "exp_samples": firing_counts(row),
            }
        )
    return {
        "interval": f"{STEP}s",
        "input_series": [
            {"series": series.selector, "values": series.values()}
            for series in series_for(row.name)
        ],
        "promql_expr_test": checks,
    }


@pytest.mark.ops
@pytest.mark.timeout(120)
def test_each_outage_fires_only_the_alert_named_for_it_with_the_shipped_rules(
    tmp_path: Path,
) -> None:
    promtool = require_binary("promtool")
    alert_for = {rule["alert"]: duration_seconds(rule.get("for", "0s")) for rule in alert_rules()}
    # given one promtool test per outage, evaluated every scrape interval
    document = {
        "rule_files": [str(RULES)],
        "evaluation_interval": f"{STEP}s",
        "tests": [promtool_case(row, alert_for) for row in ROWS],
    }
    path = tmp_path / "outage_matrix_test.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    # when promtool evaluates the shipped rules over them
    result = run([promtool, "test", "rules", str(path)], cwd=tmp_path)
    # then each outage fires its alert only, in time, and resolves
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_duration_seconds_reads_prometheus_durations() -> None:
    assert [duration_seconds(d) for d in ("1m", "90s", "1h30m", "500ms", "0s")] == [
        60,
        90,
        5400,
        0.5,
        0,
    ]
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_seconds("5 minutes")


def test_matrix_names_an_alert_of_the_shipped_rules_for_every_outage() -> None:
    names = {rule["alert"] for rule in alert_rules()}
    assert {row.alert for row in ROWS if row.alert} <= names
