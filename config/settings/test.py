"""Unit tests (pytest-django): eager Celery for pure logic only, fast hashing."""

from config.settings.local import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
