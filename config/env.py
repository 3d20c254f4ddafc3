"""The one place that reads the process environment (django-environ).

Everything else takes its configuration from Django settings, which read it
from here.
"""

from __future__ import annotations

from pathlib import Path

import environ

BASE_DIR: Path = Path(__file__).resolve().parent.parent

env = environ.Env()
