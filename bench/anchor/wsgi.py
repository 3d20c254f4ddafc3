"""WSGI entry point of the anchor project (`gunicorn bench.anchor.wsgi`)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.anchor.settings")
application = get_wsgi_application()
