#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
    from django.core.management import execute_from_command_line  # noqa: PLC0415 - Django's manage.py: after DJANGO_SETTINGS_MODULE is set

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
