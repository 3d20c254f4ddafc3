"""Unit tests (pytest-django): eager Celery for pure logic only, fast hashing."""

from config.settings.local import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
JOBS_BACKPRESSURE_OUTBOX_CACHE_SECONDS = (
    0.0  # exact counts in unit tests; test_submit_cache covers the cache
)
