"""A fresh app for the tests of issue 22: one `kinds` module, one `@task` function, nothing else.

Added to INSTALLED_APPS by tests/byow_app/settings.py (integration) or
override_settings (unit); the platform finds its kind by discovery
(jobs.kinds.discovery) and runs its task through the Tasks backend.
"""
