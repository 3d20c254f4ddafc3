"""Who sees which job, rate limits, the client's address and admin login lockout.

README "Configuration" and platform/README.md "Security model" say what each
one does for an operator. base.py reads these names when it builds
REST_FRAMEWORK and MIDDLEWARE, and star-imports the module at its end.
"""

from __future__ import annotations

from datetime import timedelta

from config.env import env

# Who sees and acts on which job (jobs.ownership): "owner" (a job is its
# submitter's; staff with jobs.view_job / jobs.change_job see / act on all) or
# "shared" (every authenticated user sees and acts on every job). jobs.E010
# refuses anything else.
JOBS_JOB_VISIBILITY: str = env.str("JOBS_JOB_VISIBILITY", default="owner")

# Reverse proxies in front of gunicorn that append to X-Forwarded-For (nginx in
# the compose deployment: 1). The client's address, for the API's rate limits
# and the admin's login lockout, is the one the outermost trusted proxy saw:
# with 0, X-Forwarded-For is ignored (a client could write anything there).
# https://www.django-rest-framework.org/api-guide/throttling/#how-clients-are-identified
JOBS_TRUSTED_PROXY_COUNT: int = env.int("JOBS_TRUSTED_PROXY_COUNT", default=0)

# API rate limits (DRF throttling, jobs.api.throttling), "N/s", "N/m", "N/h" or
# "N/d"; "off" lifts one. Per token (the authenticated user), per client address
# (every request), and failed authentications per client address (a wrong or
# malformed token: past the limit the address gets 429 before its token is
# even looked up). Each counts in fixed windows of a second / minute / ...
JOBS_API_RATE_PER_TOKEN: str = env.str("JOBS_API_RATE_PER_TOKEN", default="50/s")
JOBS_API_RATE_PER_ADDRESS: str = env.str("JOBS_API_RATE_PER_ADDRESS", default="100/s")
JOBS_API_AUTH_FAILURE_RATE: str = env.str("JOBS_API_AUTH_FAILURE_RATE", default="20/m")


def _rate(value: str) -> str | None:
    return None if value.strip().lower() in ("", "off", "none") else value.strip()


API_THROTTLE_RATES: dict[str, str | None] = {
    "token": _rate(JOBS_API_RATE_PER_TOKEN),
    "address": _rate(JOBS_API_RATE_PER_ADDRESS),
    "auth_failure": _rate(JOBS_API_AUTH_FAILURE_RATE),
}

# The throttles count in the database (jobs.services.rate_windows, table
# jobs_ratewindow), shared by every gunicorn worker and host: never in
# per-process memory, never on the broker.

# Admin login lockout (django-axes, its own tables): after FAILURE_LIMIT
# failed logins from one client address, that address cannot log in, even
# with the right password, for COOLOFF seconds.
# https://django-axes.readthedocs.io/en/latest/4_configuration.html
AXES_FAILURE_LIMIT: int = env.int("JOBS_ADMIN_LOGIN_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(seconds=env.int("JOBS_ADMIN_LOGIN_COOLOFF_SECONDS", default=900))
AXES_LOCKOUT_PARAMETERS = ["ip_address"]
# The same client address as the API's rate limits (JOBS_TRUSTED_PROXY_COUNT).
AXES_CLIENT_IP_CALLABLE = "jobs.api.throttling.client_address"
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out address before any password is checked.
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
