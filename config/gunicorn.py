"""Gunicorn server settings (`gunicorn config.wsgi --config config/gunicorn.py`)."""

from config.env import env

bind = env.str("WEB_BIND", default="127.0.0.1:8000")
workers = env.int("WEB_CONCURRENCY", default=2)
threads = env.int("WEB_THREADS", default=4)
timeout = env.int("WEB_TIMEOUT", default=30)
accesslog = env.str("WEB_ACCESS_LOG", default="-") or None
