"""Outcomes that could not be written: kept on local disk (and in Redis), written later.

An attempt's work is done once; if its outcome cannot reach the database
(an outage longer than the runner's bounded retries), the outcome must not
be dropped, or the lease sweep would later call the attempt lost and run
the work again. The runner keeps it

- in a file of the worker host's spool directory (JOBS_OUTCOME_SPOOL_DIR,
  written and fsynced before the message is acknowledged), which the
  worker's main process writes to the database as soon as it can
  (jobs.spool_drainer); after a database outage the scheduler waits
  JOBS_LEASE_RECOVERY_GRACE seconds before it judges leases (jobs.scheduler),
  time for the workers to write their files;
- with the Redis state store only (jobs.state_store), also in a Redis list,
  which the scheduler writes with attempt_finish when Redis answers: this
  copy survives losing the worker host. It never holds the lease sweep back.

Whichever copy is written first wins; attempt_finish ignores an attempt
already recorded, so the other is a no-op.

Each entry is the JSON of {job_id, attempt, rss_bytes, report: AttemptReport
fields without the exception}.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from django.db import DatabaseError

from jobs.broker import broker_client
from jobs.db import is_unavailable
from jobs.engine.values import AttemptReport
from jobs.host_dirs import spool_dir
from jobs.models import AttemptOutcome
from jobs.services.attempt_finish import attempt_finish

logger = logging.getLogger(__name__)

SPOOL_KEY = "jobs:outcomes:spool"


def _entry(
    job_id: uuid.UUID | str, attempt: int, report: AttemptReport, rss_bytes: int | None
) -> str:
    fields = asdict(report)
    fields.pop("exception", None)
    entry = {"job_id": str(job_id), "attempt": attempt, "rss_bytes": rss_bytes, "report": fields}
    return json.dumps(entry, default=str)


def outcome_spool_local(
    *, job_id: uuid.UUID | str, attempt: int, report: AttemptReport, rss_bytes: int | None
) -> Path:
    """Keep the outcome in a file of spool_dir() (written, fsynced, renamed into place).

    Returns the file's path. Raises OSError when it cannot be written.
    """
    directory = spool_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{job_id}-{attempt}.json"
    partial = directory / f".{path.name}.{os.getpid()}.partial"
    with open(partial, "w", encoding="utf-8") as file:
        file.write(_entry(job_id, attempt, report, rss_bytes))
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    return path


def outcome_spool(
    *, job_id: uuid.UUID | str, attempt: int, report: AttemptReport, rss_bytes: int | None
) -> None:
    """Keep the outcome of attempt `attempt` of `job_id` in Redis for the scheduler to write.

    Raises redis errors when Redis is unreachable too.
    """
    broker_client().rpush(SPOOL_KEY, _entry(job_id, attempt, report, rss_bytes))


def outcomes_drain(*, limit: int = 500) -> int:
    """Write up to `limit` spooled outcomes with attempt_finish; return how many were written.

    Stops (and puts the entry back at the head) at the first connection
    error: the database is still away. A malformed entry is logged and
    dropped. Raises redis errors when Redis is unreachable.
    """
    client = broker_client()
    written = 0
    for _ in range(limit):
        raw = client.lpop(SPOOL_KEY)
        if not isinstance(raw, bytes | str):
            break
        try:
            entry = json.loads(raw)
            report = _report(entry["report"])
        except (ValueError, KeyError, TypeError) as exc:
            logger.error("malformed spooled outcome dropped (%s): %r", exc, raw[:500])
            continue
        try:
            attempt_finish(
                job_id=entry["job_id"],
                attempt=int(entry["attempt"]),
                report=report,
                rss_bytes=entry.get("rss_bytes"),
            )
        except DatabaseError as exc:
            if is_unavailable(exc):
                client.lpush(SPOOL_KEY, raw)
            raise
        written += 1
    if written:
        logger.info("wrote %s spooled outcomes", written)
    return written


def outcomes_drain_local(*, limit: int = 500) -> int:
    """Write up to `limit` outcomes of spool_dir() with attempt_finish; return how many.

    A file is removed once its outcome is in the database or the attempt
    was already recorded (the Redis copy won). Stops at the first error
    saying the database is unavailable (jobs.db.is_unavailable) and raises
    it; the file stays for the next call. A malformed file is logged and
    moved aside (suffix .bad). Never reads files being written (.partial).
    """
    directory = spool_dir()
    try:
        paths = sorted(p for p in directory.iterdir() if p.suffix == ".json")[:limit]
    except FileNotFoundError:
        return 0
    written = 0
    for path in paths:
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue  # another drainer on this host took it
        try:
            entry = json.loads(raw)
            report = _report(entry["report"])
        except (ValueError, KeyError, TypeError) as exc:
            logger.error("malformed spooled outcome %s set aside (%s)", path, exc)
            path.replace(path.with_suffix(".bad"))
            continue
        attempt_finish(
            job_id=entry["job_id"],
            attempt=int(entry["attempt"]),
            report=report,
            rss_bytes=entry.get("rss_bytes"),
        )
        path.unlink(missing_ok=True)
        written += 1
    if written:
        logger.info("wrote %s outcomes spooled on this host (%s)", written, directory)
    return written


def _report(fields: dict[str, Any]) -> AttemptReport:
    known = {name for name in AttemptReport.__dataclass_fields__ if name != "exception"}
    values = {k: v for k, v in fields.items() if k in known}
    values["outcome"] = AttemptOutcome(values["outcome"])
    return AttemptReport(**values)
