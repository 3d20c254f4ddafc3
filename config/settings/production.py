"""Production: the secret key and database URL are required and have no default."""

from config.settings.base import *  # noqa: F403
from config.settings.base import MIDDLEWARE, env

DEBUG = False
# Missing variables fail at boot with "Set the DJANGO_SECRET_KEY environment variable".
SECRET_KEY = env.str("DJANGO_SECRET_KEY")
JOBS_FAULT_KINDS = env.bool("JOBS_FAULT_KINDS", default=False)
DATABASES = {"default": env.db_url("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# Outbound URLs (webhooks, CSV sources) may not reach loopback, private or
# link-local addresses (Redis, the metadata service) unless explicitly allowed.
JOBS_ALLOW_PRIVATE_DESTINATIONS = env.bool("JOBS_ALLOW_PRIVATE_DESTINATIONS", default=False)

# https://whitenoise.readthedocs.io/en/stable/django.html
# Gunicorn serves the admin's CSS and Swagger UI's scripts from STATIC_ROOT
# (filled by `manage.py collectstatic`, run when the image is built): right
# after SecurityMiddleware, with hashed, compressed, forever-cacheable names.
_after = MIDDLEWARE.index("django.middleware.security.SecurityMiddleware") + 1
MIDDLEWARE = [
    *MIDDLEWARE[:_after],
    "whitenoise.middleware.WhiteNoiseMiddleware",
    *MIDDLEWARE[_after:],
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
