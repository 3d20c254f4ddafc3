"""bench.start_checks: the start statement without its flow-control checks, from the shipped SQL."""

from __future__ import annotations

from bench import start_checks
from jobs.engine import sql


def test_the_plain_start_lacks_only_the_pause_subquery_and_the_lease_condition() -> None:
    shipped = sql.queries("postgres")["start"]
    plain = start_checks.without_checks(shipped)
    assert "jobs_pause" in shipped
    assert "jobs_pause" not in plain
    assert start_checks.LEASE_CHECK in shipped
    assert start_checks.LEASE_CHECK not in plain
    # Everything else is kept: the job's guard, the lease it takes and the attempt's INSERT.
    for kept in (
        "UPDATE jobs_job",
        "status = %(queued)s",
        "lease_expires_at =",
        "INSERT INTO jobs_attempt",
    ):
        assert kept in plain
    assert len(shipped) - len(plain) < 400
