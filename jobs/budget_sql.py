"""The PostgreSQL retry budget's two functions (created by migration 0015; jobs.budget_pg calls them).

Each decision is one statement, `SELECT * FROM jobs_retry_budget_reserve(...)`,
judged by the database's `now()`; it is the Redis store's Lua script
(jobs.budget) in PL/pgSQL. A kind's decisions are serialized by a
transaction-scoped advisory lock on the kind, so two workers never both take
the last slot; every row lock is taken under its kind's advisory lock, and
`jobs_retry_budget_count_firsts` takes several kinds' locks in name order, so
no two statements wait for each other in a cycle.
"""

from __future__ import annotations

LOCK_CLASS = 72_011  # first key of pg_advisory_xact_lock(int, int): "retry budget"

COUNT_FIRSTS = """
CREATE OR REPLACE FUNCTION jobs_retry_budget_count_firsts(
    p_width double precision, p_kinds text[], p_indexes bigint[], p_counts integer[]
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    k text;
BEGIN
    FOR k IN SELECT DISTINCT u.k FROM unnest(p_kinds) AS u(k) ORDER BY u.k LOOP
        PERFORM pg_advisory_xact_lock(%(lock)s, hashtext(k));
    END LOOP;
    INSERT INTO jobs_retrybudgetwindow (kind, width, "index", firsts, retries, exhausted, touched_at)
    SELECT u.k, p_width, u.i, u.n, 0, false, now()
    FROM unnest(p_kinds, p_indexes, p_counts) AS u(k, i, n)
    ORDER BY u.k, u.i
    ON CONFLICT (kind, width, "index") DO UPDATE
        SET firsts = jobs_retrybudgetwindow.firsts + EXCLUDED.firsts, touched_at = now();
END
$$;
""".replace("%(lock)s", str(LOCK_CLASS))

RESERVE = """
CREATE OR REPLACE FUNCTION jobs_retry_budget_reserve(
    p_kind text, p_due double precision, p_width double precision, p_ratio double precision,
    p_floor integer, p_last double precision, p_guard double precision,
    p_spread double precision, p_ttl double precision, p_release bigint[],
    p_first_indexes bigint[], p_first_counts integer[]
) RETURNS TABLE (granted boolean, added double precision, exhausted integer,
                 used integer, lim double precision)
LANGUAGE plpgsql AS $$
DECLARE
    now_s double precision := extract(epoch FROM now());
    k0 bigint := floor(p_due / p_width);
    f0 integer := 0;
    r0 integer := 0;
    t double precision := p_due;
    k bigint;
    edge boolean;
    ex integer := 0;
    start_s double precision;
    fk integer;
    rk integer;
    fn integer;
    rn integer;
BEGIN
    PERFORM pg_advisory_xact_lock(%(lock)s, hashtext(p_kind));
    DELETE FROM jobs_retrybudgetwindow w
        WHERE w.kind = p_kind AND w.touched_at < now() - make_interval(secs => p_ttl);
    IF coalesce(array_length(p_first_indexes, 1), 0) > 0 THEN
        INSERT INTO jobs_retrybudgetwindow AS w (kind, width, "index", firsts, retries, exhausted, touched_at)
        SELECT p_kind, p_width, u.i, u.n, 0, false, now()
        FROM unnest(p_first_indexes, p_first_counts) AS u(i, n) ORDER BY u.i
        ON CONFLICT (kind, width, "index") DO UPDATE
            SET firsts = w.firsts + EXCLUDED.firsts, touched_at = now();
    END IF;
    UPDATE jobs_retrybudgetwindow w SET retries = w.retries - 1, touched_at = now()
        WHERE w.kind = p_kind AND w.width = p_width AND w."index" = ANY (p_release)
          AND w.retries > 0;
    SELECT w.firsts, w.retries INTO f0, r0 FROM jobs_retrybudgetwindow w
        WHERE w.kind = p_kind AND w.width = p_width AND w."index" = k0;
    f0 := coalesce(f0, 0);
    r0 := coalesce(r0, 0);
    WHILE t <= p_last LOOP
        k := floor(t / p_width);
        edge := (k + 1) * p_width - t < p_guard;
        SELECT w.firsts, w.retries INTO fk, rk FROM jobs_retrybudgetwindow w
            WHERE w.kind = p_kind AND w.width = p_width AND w."index" = k;
        SELECT w.firsts, w.retries INTO fn, rn FROM jobs_retrybudgetwindow w
            WHERE w.kind = p_kind AND w.width = p_width AND w."index" = k + 1;
        IF coalesce(rk, 0) + 1 <= p_ratio * coalesce(fk, 0) + p_floor
           AND (NOT edge OR coalesce(rn, 0) + 1 <= p_ratio * coalesce(fn, 0) + p_floor) THEN
            INSERT INTO jobs_retrybudgetwindow AS w (kind, width, "index", firsts, retries, exhausted, touched_at)
            SELECT p_kind, p_width, g, 0, 1, false, now()
            FROM generate_series(k, CASE WHEN edge THEN k + 1 ELSE k END) AS g
            ON CONFLICT (kind, width, "index") DO UPDATE
                SET retries = w.retries + 1, touched_at = now();
            RETURN QUERY SELECT true, t - p_due, ex, r0, p_ratio * f0 + p_floor;
            RETURN;
        END IF;
        IF ex = 0 THEN
            -- The once-per-window log line: the window holding now() is marked spent.
            UPDATE jobs_retrybudgetwindow w SET exhausted = true, touched_at = now()
                WHERE w.kind = p_kind AND w.width = p_width
                  AND w."index" = floor(now_s / p_width) AND NOT w.exhausted;
            IF FOUND THEN
                ex := 1;
            ELSE
                INSERT INTO jobs_retrybudgetwindow (kind, width, "index", firsts, retries, exhausted, touched_at)
                VALUES (p_kind, p_width, floor(now_s / p_width), 0, 0, true, now())
                ON CONFLICT (kind, width, "index") DO NOTHING;
                ex := CASE WHEN FOUND THEN 1 ELSE 2 END;
            END IF;
        END IF;
        start_s := (k + 1) * p_width;
        t := start_s + p_spread * (p_width - p_guard);
        IF t > p_last AND start_s <= p_last THEN
            t := p_last;
        END IF;
    END LOOP;
    RETURN QUERY SELECT false, 0::double precision, ex, r0, p_ratio * f0 + p_floor;
END
$$;
""".replace("%(lock)s", str(LOCK_CLASS))

DROP = """
DROP FUNCTION IF EXISTS jobs_retry_budget_reserve(
    text, double precision, double precision, double precision, integer, double precision,
    double precision, double precision, double precision, bigint[], bigint[], integer[]);
DROP FUNCTION IF EXISTS jobs_retry_budget_count_firsts(double precision, text[], bigint[], integer[]);
"""
