"""The PostgreSQL rate check: `jobs_rate_admit`, `jobs_rate_wait`, `jobs_rate_hold` (migration 0020).

`p_rates` is {kind: {"t": seconds between starts, "b": burst, "path": [...]}}
(jobs.rate_gate.rates_json); a kind not in it has no rate. The bucket's key is
the payload's value at `path` as jsonb text ('' for a limit per kind, 'null' when
the payload has no value there).

- `jobs_rate_admit(id, kind, payload, enqueued_at, waiting_reason, at, rates)`,
  in the start statement's WHERE (`start_limited`) and first in the general
  path: under a transaction-scoped advisory lock on (kind, key) (class
  RATE_LOCK_CLASS), it refuses a job never held while an older job of the kind
  (key) is held for the rate, unreleased (its place; a job the pacer released
  was released oldest first, so it is not judged by place again),
  then judges the arrival `at` by GCRA (jobs.gcra.judge) on the bucket row
  (jobs_ratebucket) and moves the bucket's `tat` when it admits. VOLATILE: its
  reads take a fresh snapshot after the lock, as jobs_concurrency_admit's do.
  Returns true when admitted (or the kind has no rate).
- `jobs_rate_wait(id, kind, payload, enqueued_at, waiting_reason, at, rates)`: seconds until
  `at` would conform, no lock (a hint for a short wait at the start); NULL when
  an older job waits or the kind has no rate.
- `jobs_rate_hold(kind, payload, at, rates)`: the start time reserved for a
  job held at `at` (epoch seconds), under the same lock: the bucket's first
  conforming time, not before the planning cursor, which then moves one
  interval on (jobs.gcra.next_slot). Which held job takes a start that has
  come is the pacer's choice: the oldest (jobs.rate_gate.fill_due_slots).
"""

from __future__ import annotations

RATE_LOCK_CLASS = 72_013  # first key of pg_advisory_xact_lock(int, int): "rate limit"

# The key of a payload: '' without a path (`#>` of an empty path is the whole payload),
# 'null' when the payload has no value there.
_KEY = (
    "CASE WHEN jsonb_array_length(lim -> 'path') = 0 THEN '' ELSE coalesce((p_payload #> "
    "ARRAY(SELECT jsonb_array_elements_text(lim -> 'path')))::text, 'null') END"
)

_LOCK = f"PERFORM pg_advisory_xact_lock({RATE_LOCK_CLASS}, hashtext(p_kind || chr(31) || k));"

_OLDER_WAITS = """EXISTS (
        SELECT 1 FROM jobs_job
        WHERE kind = p_kind AND status = 'queued' AND waiting_reason = 'rate_limit'
          AND id <> p_id AND (publish_claimed_until IS NULL OR publish_claimed_until < now())
          AND (enqueued_at < p_enqueued OR (enqueued_at = p_enqueued AND id < p_id))
          AND (k = '' OR coalesce((payload #> ARRAY(
                SELECT jsonb_array_elements_text(lim -> 'path')))::text, 'null') = k)
    )"""

# The variables every function starts with: its kind's rate, the key, the time judged.
_DECLARE = """DECLARE
    lim jsonb := p_rates -> p_kind;
    k text;
    at float8 := extract(epoch FROM p_at);
"""

CREATE = (
    """
CREATE OR REPLACE FUNCTION jobs_rate_admit(
    p_id uuid, p_kind text, p_payload jsonb, p_enqueued timestamptz, p_reason text,
    p_at timestamptz, p_rates jsonb
) RETURNS boolean LANGUAGE plpgsql VOLATILE COST 10000 AS $$
%(declare)s    t float8;
    base float8;
BEGIN
    IF lim IS NULL THEN
        RETURN true;
    END IF;
    k := %(key)s;
    %(lock)s
    IF p_reason <> 'rate_limit' AND %(older)s THEN
        RETURN false;
    END IF;
    t := (lim ->> 't')::float8;
    SELECT greatest(tat, at) INTO base FROM jobs_ratebucket WHERE kind = p_kind AND key = k;
    base := coalesce(base, at);
    IF base - (lim ->> 'b')::integer * t > at THEN
        RETURN false;
    END IF;
    INSERT INTO jobs_ratebucket (kind, key, tat, plan) VALUES (p_kind, k, base + t, NULL)
    ON CONFLICT (kind, key) DO UPDATE SET tat = EXCLUDED.tat;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION jobs_rate_wait(
    p_id uuid, p_kind text, p_payload jsonb, p_enqueued timestamptz, p_reason text,
    p_at timestamptz, p_rates jsonb
) RETURNS float8 LANGUAGE plpgsql VOLATILE AS $$
%(declare)s    earliest float8;
BEGIN
    IF lim IS NULL THEN
        RETURN NULL;
    END IF;
    k := %(key)s;
    IF p_reason <> 'rate_limit' AND %(older)s THEN
        RETURN NULL;
    END IF;
    SELECT tat - (lim ->> 'b')::integer * (lim ->> 't')::float8 INTO earliest
    FROM jobs_ratebucket WHERE kind = p_kind AND key = k;
    RETURN greatest(coalesce(earliest, at) - at, 0);
END
$$;

CREATE OR REPLACE FUNCTION jobs_rate_hold(
    p_kind text, p_payload jsonb, p_at timestamptz, p_rates jsonb
) RETURNS float8 LANGUAGE plpgsql VOLATILE AS $$
%(declare)s    t float8;
    b_tat float8;
    b_plan float8;
    slot float8;
BEGIN
    IF lim IS NULL THEN
        RETURN at;
    END IF;
    k := %(key)s;
    %(lock)s
    t := (lim ->> 't')::float8;
    SELECT tat, plan INTO b_tat, b_plan FROM jobs_ratebucket WHERE kind = p_kind AND key = k;
    slot := greatest(at, coalesce(b_tat - (lim ->> 'b')::integer * t, at));
    slot := greatest(slot, coalesce(b_plan, slot));
    INSERT INTO jobs_ratebucket (kind, key, tat, plan) VALUES (p_kind, k, NULL, slot + t)
    ON CONFLICT (kind, key) DO UPDATE SET plan = EXCLUDED.plan;
    RETURN slot;
END
$$;
""".replace("%(older)s", _OLDER_WAITS)
    .replace("%(key)s", _KEY)
    .replace("%(lock)s", _LOCK)
    .replace("%(declare)s", _DECLARE)
)

DROP = """
DROP FUNCTION IF EXISTS jobs_rate_admit(uuid, text, jsonb, timestamptz, text, timestamptz, jsonb);
DROP FUNCTION IF EXISTS jobs_rate_wait(uuid, text, jsonb, timestamptz, text, timestamptz, jsonb);
DROP FUNCTION IF EXISTS jobs_rate_hold(text, jsonb, timestamptz, jsonb);
"""
