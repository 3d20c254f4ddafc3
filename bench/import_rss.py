"""Where a worker child's RSS goes, import by import: `python -m bench.import_rss`.

A worker child is a fork of the worker's main process, so its idle RSS is
what the main process imported before forking. This imports the same
things in order in a fresh interpreter and prints the RSS each step adds
(MiB, `/proc/self/statm` after a `gc.collect()`): the `celery` command and
the prefork worker (all stock Celery's child holds), then our settings,
Django, the ORM, the PostgreSQL driver, DRF, the admin, `django.setup()`
and the worker's task modules. Uses DATABASE_URL (default: the local
PostgreSQL, as P1). Not recorded (docs/performance.md quotes it).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS: list[tuple[str, list[str]]] = [
    (
        "the `celery` command (its plugins: Flower, `celery shell`) and the prefork worker",
        ["celery.bin.celery", "celery.apps.worker", "celery.concurrency.prefork"],
    ),
    ("our settings module", []),
    ("`django.utils.log` (Django's logging setup)", ["django.utils.log"]),
    ("the ORM (`django.db.models`)", ["django.db.models"]),
    ("psycopg (the binary wheel's libpq, OpenSSL, Kerberos)", ["psycopg"]),
    ("`django.contrib.postgres` fields", ["django.contrib.postgres.fields"]),
    ("DRF serializers (the kinds' payloads)", ["rest_framework.serializers"]),
    ("the admin", ["django.contrib.admin"]),
    ("`django.setup()`: other apps, models, `ready()` hooks", []),
    ("`config.celery_app` and `jobs.tasks`", ["config.celery_app", "jobs.tasks"]),
]


def _rss_mib() -> float:
    gc.collect()
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main() -> int:
    """Print one row per step: MiB added and RSS after it."""
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    os.environ.setdefault("JOBS_METRICS_DIR", tempfile.mkdtemp(prefix="jobs-import-rss-"))
    last = _rss_mib()
    print(f"| step | + MiB | RSS MiB |\n| --- | ---: | ---: |\n| interpreter | | {last:.1f} |")
    for name, modules in STEPS:
        if name == "our settings module":
            from django.conf import settings  # noqa: PLC0415 - measures the RSS each import adds, at its own step

            settings.INSTALLED_APPS  # noqa: B018 (reading it imports the settings)
        elif name.startswith("`django.setup()`"):
            import django  # noqa: PLC0415 - measures the RSS each import adds, at its own step

            django.setup()
        for module in modules:
            importlib.import_module(module)
        now = _rss_mib()
        print(f"| {name} | {now - last:.1f} | {now:.1f} |", flush=True)
        last = now
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
