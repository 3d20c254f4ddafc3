"""Flower's configuration, loaded from the working directory by `celery -A config flower`.

https://flower.readthedocs.io/en/latest/config.html - every module-level
name that matches a Flower option sets it; command-line flags (e.g.
`--port=5556`) still win. Values come from the environment through
config/env.py, like every other setting.

- FLOWER_BASIC_AUTH: "user:password", comma-separated for several users.
  Required unless Django's DEBUG is on (config.settings.local's default),
  where it defaults to admin:admin - as production.py requires the secret
  key that local.py defaults.
- FLOWER_ADDRESS / FLOWER_PORT: where it listens (127.0.0.1:5555).
- FLOWER_URL_PREFIX: the path Flower serves under, e.g. "flower" behind the
  proxy (platform/nginx/): /flower/, /flower/metrics. Default: none (/).
- FLOWER_DB: the persistent state (shelve) file, default var/flower/flower.db,
  saved every FLOWER_STATE_SAVE_INTERVAL milliseconds and at shutdown.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from config.env import BASE_DIR, env

address = env.str("FLOWER_ADDRESS", default="127.0.0.1")
port = env.int("FLOWER_PORT", default=5555)
url_prefix = env.str("FLOWER_URL_PREFIX", default="")

if django_settings.DEBUG:
    basic_auth = env.list("FLOWER_BASIC_AUTH", default=["admin:admin"])
else:
    basic_auth = env.list("FLOWER_BASIC_AUTH")  # missing: "Set the FLOWER_BASIC_AUTH ..."
if not basic_auth or not all(":" in credential for credential in basic_auth):
    raise ImproperlyConfigured("FLOWER_BASIC_AUTH must be user:password[,user:password...]")

# Flower switches task events on in the workers too (they are on already:
# CELERY_WORKER_SEND_TASK_EVENTS).
enable_events = True

persistent = True
db = env.str("FLOWER_DB", default=str(BASE_DIR / "var" / "flower" / "flower.db"))
Path(db).parent.mkdir(parents=True, exist_ok=True)
state_save_interval = env.int("FLOWER_STATE_SAVE_INTERVAL", default=60_000)
