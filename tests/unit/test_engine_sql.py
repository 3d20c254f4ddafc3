"""jobs.engine.sql: the named queries and the finish's parameters."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from jobs.decisions import Action, Decision
from jobs.engine import changes, sql
from jobs.engine.values import AttemptReport
from jobs.models import Attempt, AttemptOutcome, Job, Pause

NOW = datetime(2026, 1, 2, tzinfo=UTC)
EXTRA = {"job_id", "number", "running", "rss", "trace_id", "parent_trace_id"}


def _params(text: str) -> set[str]:
    return set(re.findall(r"%\((\w+)\)s", text))


def test_sql_queries_are_named_and_free_of_comments() -> None:
    postgres, sqlite = sql.queries("postgres"), sql.queries("sqlite")

    assert set(postgres) == {"start", "start_limited", "finish", "finish_limited"}
    assert set(sqlite) == {
        "start_job",
        "start_job_limited",
        "start_attempt",
        "finish_job",
        "finish_attempt",
    }
    assert not any(
        line.lstrip().startswith("--") for q in postgres.values() for line in q.splitlines()
    )
    assert sql.queries("postgres") is postgres  # read once


def test_sql_tables_are_the_models_tables() -> None:
    text = " ".join([*sql.queries("postgres").values(), *sql.queries("sqlite").values()])

    tables = set(re.findall(r"\b(?:FROM|UPDATE|INTO)\s+(jobs_\w+)", text))
    # jobs_pause is read only, by the start's pause check (not_paused in shared.sql)
    assert tables == {Job._meta.db_table, Attempt._meta.db_table, Pause._meta.db_table}


@pytest.mark.parametrize(
    "decision",
    [None, Decision(Action.RETRY, delay_seconds=1.0), Decision(Action.DEAD, dead_reason="error")],
    ids=["succeeded", "retry", "dead"],
)
def test_sql_finish_params_cover_every_finish_statement(decision: Decision | None) -> None:
    outcome = AttemptOutcome.SUCCEEDED if decision is None else AttemptOutcome.ERROR
    ending = changes.ending(decision, report=AttemptReport(outcome=outcome), now=NOW)

    params = set(sql.finish_params(ending)) | EXTRA

    assert _params(sql.queries("postgres")["finish"]) <= params
    assert _params(sql.queries("sqlite")["finish_job"]) <= params
    assert _params(sql.queries("sqlite")["finish_attempt"]) <= params


def test_sql_finish_params_set_only_what_the_change_sets() -> None:
    ending = changes.ending(
        Decision(Action.RETRY, delay_seconds=1.0),
        report=AttemptReport(outcome=AttemptOutcome.ERROR),
        now=NOW,
    )

    params = sql.finish_params(ending)

    assert params["set_j_next_attempt_at"]
    assert not params["set_j_finished_at"]
    assert params["set_a_retry_delay_seconds"]
    assert params["j_result"] is None


def test_sql_finish_params_refuse_a_requeue() -> None:
    ending = changes.ending(
        Decision(Action.REQUEUE), report=AttemptReport(outcome=AttemptOutcome.WORKER_LOST), now=NOW
    )

    with pytest.raises(ValueError, match="not a finish"):
        sql.finish_params(ending)


def test_sql_fused_start_reads_the_fuse_table_only_when_some_kind_has_a_fuse() -> None:
    plain, fused = sql.queries("postgres"), sql.queries("postgres", fused=True)
    assert "jobs_fuse" not in plain["start"]
    assert "jobs_fuse" in fused["start"]
    assert "jobs_fuse" in fused["start_limited"]
    assert plain["finish"] == fused["finish"]
