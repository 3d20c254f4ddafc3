"""The PostgreSQL concurrency check, `jobs_concurrency_admit` (created by migration 0019).

Called in the start statement's WHERE (jobs/engine/sql/postgres.sql,
`start_limited`) and once at the top of the general path's transaction
(jobs.concurrency_gate.admits). For a kind without a limit in `p_limits`
it returns true at once. Otherwise it takes a transaction-scoped advisory
lock on (kind, key), then counts the kind's (key's) running jobs and looks
for an older job waiting for the same slot. The function is VOLATILE, so
those reads take a fresh snapshot *after* the lock is granted: a start that
committed while this one waited for the lock is counted (a plain COUNT in
the statement would read the statement's older snapshot and let both
through under READ COMMITTED). The job itself is never counted (a
redelivery after a lost worker finds it still `running`). The lock is held
until the start commits,
after the job row says `running`. Every lock on (kind, key) is taken
before any job row lock, so no two starts wait for each other in a cycle.
"""

from __future__ import annotations

LOCK_CLASS = 72_012  # first key of pg_advisory_xact_lock(int, int): "concurrency limit"

ADMIT = """
CREATE OR REPLACE FUNCTION jobs_concurrency_admit(
    p_id uuid, p_kind text, p_payload jsonb, p_enqueued timestamptz, p_limits jsonb
) RETURNS boolean LANGUAGE plpgsql VOLATILE COST 10000 AS $$
DECLARE
    lim jsonb := p_limits -> p_kind;
    path text[];
    k jsonb;
    live integer;
BEGIN
    IF lim IS NULL THEN
        RETURN true;
    END IF;
    path := ARRAY(SELECT jsonb_array_elements_text(lim -> 'path'));
    IF cardinality(path) > 0 THEN
        k := p_payload #> path;
    END IF;
    PERFORM pg_advisory_xact_lock(%(lock)s, hashtext(p_kind || chr(31) || coalesce(k::text, '')));
    SELECT count(*) INTO live FROM jobs_job
    WHERE kind = p_kind AND status = 'running' AND id <> p_id
      AND (cardinality(path) = 0 OR payload #> path IS NOT DISTINCT FROM k);
    IF live >= (lim ->> 'n')::integer THEN
        RETURN false;
    END IF;
    RETURN NOT EXISTS (
        SELECT 1 FROM jobs_job
        WHERE kind = p_kind AND status = 'queued' AND waiting_reason = 'concurrency_limit'
          AND id <> p_id
          AND (enqueued_at < p_enqueued OR (enqueued_at = p_enqueued AND id < p_id))
          AND (cardinality(path) = 0 OR payload #> path IS NOT DISTINCT FROM k)
    );
END
$$;
""".replace("%(lock)s", str(LOCK_CLASS))

DROP = """
DROP FUNCTION IF EXISTS jobs_concurrency_admit(uuid, text, jsonb, timestamptz, jsonb);
"""
