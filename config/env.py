"""The one place that reads the process environment (django-environ).

Everything else takes its configuration from Django settings, which read it
from here.
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR: Path = Path(__file__).resolve().parent.parent

env = environ.Env()


def metrics_root() -> Path:
    """Root of the Prometheus multiprocess directories (JOBS_METRICS_DIR, default var/metrics).

    Read here, not from Django settings, because gunicorn's hooks need it
    before Django is set up.
    """
    return Path(env.str("JOBS_METRICS_DIR", default=str(BASE_DIR / "var" / "metrics")))
