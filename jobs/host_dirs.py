"""Directories a worker host keeps for one database: the outcome spool and cancellation flags."""

from __future__ import annotations

import hashlib
from pathlib import Path

from django.conf import settings


def spool_dir() -> Path:
    """This database's outcome spool directory on this host.

    JOBS_OUTCOME_SPOOL_DIR when set; else var/outcomes/<12 hex digits of
    the database's identity> under the project, so platforms that share a
    host but not a database never write each other's outcomes.
    """
    if settings.JOBS_OUTCOME_SPOOL_DIR:
        return Path(settings.JOBS_OUTCOME_SPOOL_DIR)
    db = settings.DATABASES["default"]
    identity = f"{db.get('ENGINE')}|{db.get('HOST')}|{db.get('PORT')}|{db.get('NAME')}"
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return Path(settings.BASE_DIR) / "var" / "outcomes" / digest
