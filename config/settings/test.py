"""Unit tests (pytest-django): eager Celery for pure logic only, fast hashing."""

from config.settings.local import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Exact counts in unit tests; test_submit_cache covers both caches.
JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS = 0.0
JOBS_BACKPRESSURE_READY_CACHE_SECONDS = 0.0
# Stamps in the submitting request: pytest-django's test transaction is
# invisible to a writer thread's own connection (test_publish_stamps covers it).
JOBS_PUBLISH_STAMP_DELAY_SECONDS = 0.0
