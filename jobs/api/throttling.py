"""API rate limits (DRF throttling) and the client's address they are keyed by.

Three limits, rates in settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
(config/settings/security.py): per token (`token`: the authenticated user;
DRF's authtoken gives a user one token), per client address (`address`:
every request that reaches DRF), and failed token authentications per client
address (`auth_failure`). DRF authenticates before it throttles, so a wrong
token would never reach the first two: TokenAuthentication below checks the
failure limit first and counts each failure. Past any limit the answer is
429 with Retry-After (the rest of the window), in the API's error shape
(jobs.api.errors).

The throttles are DRF's (rates parsed by SimpleRateThrottle, checked by
APIView.check_throttles); only their counting is ours: exact fixed-window
counters in the database, shared by every process and host
(jobs.services.rate_windows, which says why not DRF's cache-based windows).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest
from rest_framework import authentication, exceptions, permissions, throttling
from rest_framework.settings import api_settings

from jobs.services.rate_windows import rate_window_hit, rate_window_hits

logger = logging.getLogger(__name__)


def client_address(request: HttpRequest) -> str:
    """The client's IP address: REMOTE_ADDR, or the address the outermost of
    JOBS_TRUSTED_PROXY_COUNT proxies saw (DRF's NUM_PROXIES rule on X-Forwarded-For).

    Also django-axes' AXES_CLIENT_IP_CALLABLE, so the admin's lockout and the
    API's limits see one address. Something that is not an IP address in
    X-Forwarded-For (a proxy that does not append, a count set too high)
    falls back to REMOTE_ADDR.
    """
    remote = str(request.META.get("REMOTE_ADDR") or "")
    candidate = throttling.BaseThrottle().get_ident(request) or remote
    try:
        return str(ipaddress.ip_address(candidate.strip()))
    except ValueError:
        return remote


class DatabaseRateThrottle(throttling.SimpleRateThrottle):
    """A DRF throttle counting in the database (jobs.services.rate_windows), keyed by
    `client_address` unless a subclass keys otherwise.

    The rate is read when the throttle is made (per request), so a changed
    setting applies at once; a rate of None lifts the limit. A refused
    request counts too: a client that keeps hammering stays refused until
    the window ends. A database that refuses the count (a read-only
    standby after a failover) lets safe requests (GET, HEAD, OPTIONS) through
    uncounted, so reads go on; an unsafe one gets the database's error (503),
    as its own write would.
    """

    left: float = 0.0

    def get_rate(self) -> str | None:
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_ident(self, request: Any) -> str:
        return client_address(request)

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        key = self.get_cache_key(request, view)
        if key is None:
            return True
        try:
            hits, self.left = rate_window_hit(key=key, duration=self.duration)
        except DatabaseError as error:
            if getattr(request, "method", None) not in permissions.SAFE_METHODS:
                raise
            logger.warning(
                "rate limit %s not counted for %s %s: %s",
                self.scope,
                request.method,
                getattr(request, "path", ""),
                str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__,
            )
            return True
        return hits <= self.num_requests

    def wait(self) -> float:
        return max(self.left, 1.0)


class TokenRateThrottle(DatabaseRateThrottle):
    """Requests per authenticated user (their token); anonymous ones are the address's."""

    scope = "token"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": user.pk}


class AddressRateThrottle(DatabaseRateThrottle):
    """Requests per client address, whoever sends them."""

    scope = "address"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class AuthFailureThrottle(DatabaseRateThrottle):
    """Failed token authentications per client address: checked before, counted after."""

    scope = "auth_failure"

    def wait_if_exhausted(self, request: Any) -> float | None:
        """Seconds to wait when the address used up its failures, else None (nothing counted)."""
        if self.rate is None:
            return None
        key = self.get_cache_key(request, None)
        hits, left = rate_window_hits(key=key, duration=self.duration)
        return max(left, 1.0) if hits >= self.num_requests else None

    def record_failure(self, request: Any) -> None:
        """Count one failed authentication of the request's address."""
        self.allow_request(request, None)

    def get_cache_key(self, request: Any, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's TokenAuthentication; an address past its failure limit gets 429 before the lookup."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        words = authentication.get_authorization_header(request).split()
        if not words or words[0].lower() != self.keyword.lower().encode():
            return None  # no token offered: nothing to count (permissions answer 401)
        failures = AuthFailureThrottle()
        wait = failures.wait_if_exhausted(request)
        if wait is not None:
            raise exceptions.Throttled(
                wait,
                detail="Too many failed authentications from this address; "
                f"retry in {int(wait + 0.999)} s.",
            )
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed:
            failures.record_failure(request)
            raise
