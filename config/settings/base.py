"""Settings shared by every environment; every value comes from the environment."""

from __future__ import annotations

from config.env import BASE_DIR, env
from config.settings import security

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default="")
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Admin login lockout (config/settings/security.py).
    "axes",
    "jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads the body: a declared Content-Length over the limit
    # is answered 413 at once (jobs.body_limit).
    "jobs.body_limit.DeclaredBodyLimitMiddleware",
    # Before any view: a NUL in a query parameter would reach PostgreSQL (500).
    "jobs.middleware.RefuseNulInQueryMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A dropped database connection answers 503 + Retry-After, not 500.
    "jobs.middleware.DatabaseUnavailableMiddleware",
    # Last, as django-axes asks: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# https://docs.djangoproject.com/en/5.2/ref/settings/#databases
# SQLite when DATABASE_URL is unset: WAL lets readers run beside the one writer,
# IMMEDIATE transactions take the write lock up front (no upgrade deadlocks
# between worker processes), and the timeout makes writers queue, not fail.
DATABASES = {"default": env.db_url("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # A server that stops answering (a partition, a frozen host) must fail a
    # connection within seconds, not hang a request or a worker child until
    # the kernel gives up (minutes): libpq's connect timeout, TCP keepalives
    # on an idle connection and a bound on unacknowledged data (TCP only;
    # ignored on Unix sockets). Options given in DATABASE_URL win.
    DATABASES["default"]["OPTIONS"] = {
        "connect_timeout": env.int("DATABASE_CONNECT_TIMEOUT", default=5),
        "keepalives": 1,
        "keepalives_idle": 10,
        "keepalives_interval": 5,
        "keepalives_count": 3,
        "tcp_user_timeout": 20_000,  # milliseconds
        **DATABASES["default"].get("OPTIONS", {}),
    }
# Seconds a PostgreSQL round trip may wait for its answer before a watchdog
# cuts the connection (jobs.db_deadline): a server that went silent without
# an error must not freeze the scheduler or a request. 0: no deadline.
# Applied in the web, the scheduler and the worker's main process only: not in
# worker children (the hard time limit bounds an attempt) nor in migrate.
DATABASE_QUERY_DEADLINE: float = env.float("DATABASE_QUERY_DEADLINE", default=30.0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
# https://docs.djangoproject.com/en/5.2/ref/settings/#static-root
# Where `collectstatic` gathers the admin's and Swagger UI's files (production
# serves them from here with WhiteNoise).
STATIC_ROOT = env.path("DJANGO_STATIC_ROOT", default=BASE_DIR / "var" / "static")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's TokenAuthentication, with failed attempts limited per client address.
        "jobs.api.throttling.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # https://www.django-rest-framework.org/api-guide/throttling/
    "DEFAULT_THROTTLE_CLASSES": [
        "jobs.api.throttling.TokenRateThrottle",
        "jobs.api.throttling.AddressRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": security.API_THROTTLE_RATES,
    "NUM_PROXIES": security.JOBS_TRUSTED_PROXY_COUNT,
    "DEFAULT_PARSER_CLASSES": ["jobs.api.parsers.BoundedJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "jobs.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Jobs API",
    "DESCRIPTION": "Submit, inspect, cancel and requeue background jobs.",
    "VERSION": "0.1.0",
    # Swagger UI's assets from the installed sidecar package, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

from config.settings.celery import *  # noqa: E402,F403
from config.settings.jobs import *  # noqa: E402,F403
from config.settings.security import *  # noqa: E402,F403
