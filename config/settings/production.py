"""Production: the secret key and database URL are required and have no default."""

from config.settings.base import *  # noqa: F403
from config.settings.base import JOBS_TRUSTED_PROXY_COUNT, MIDDLEWARE, env

DEBUG = False
# Missing variables fail at boot with "Set the DJANGO_SECRET_KEY environment variable".
SECRET_KEY = env.str("DJANGO_SECRET_KEY")
JOBS_FAULT_KINDS = env.bool("JOBS_FAULT_KINDS", default=False)
DATABASES = {"default": env.db_url("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
# HTTPS only: plain HTTP is redirected, browsers are told to use HTTPS for a
# year (HSTS, subdomains included; the preload directive alone puts the site
# on no browser's list: submitting the domain does). /healthz and /metrics
# still answer plain HTTP, for the container healthcheck and Prometheus inside
# the deployment. `manage.py check --deploy` prints no warning with these.
# https://docs.djangoproject.com/en/5.2/ref/middleware/#http-strict-transport-security
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
# Behind the trusted reverse proxies (JOBS_TRUSTED_PROXY_COUNT), TLS ends at
# the proxy: its X-Forwarded-Proto header says whether the client used HTTPS
# (the proxy must set it, overwriting the client's). Without a trusted proxy
# the header is ignored: a client could write it.
# https://docs.djangoproject.com/en/5.2/ref/settings/#secure-proxy-ssl-header
if JOBS_TRUSTED_PROXY_COUNT > 0:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
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
