"""API rate limits (DRF throttling) and the client's address they are keyed by.

Three limits, rates in settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
(config/settings/security.py): per token (`token`: the authenticated user;
DRF's authtoken gives a user one token), per client address (`address`:
every request that reaches DRF), and failed token authentications per client
address (`auth_failure`). DRF authenticates before it throttles, so a wrong
token would never reach the first two: TokenAuthentication below checks the
failure limit first and counts each failure. Past any limit the answer is
429 with Retry-After, in the API's error shape (jobs.api.errors).

Counters are DRF's sliding windows (a list of request times per key) in
Django's DatabaseCache, shared by every process and host. DRF reads and
writes a window without a lock, so under concurrent requests from one key
a few more than the limit may pass; the limit holds to within the number
of requests in flight at once.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.core.cache import BaseCache, caches
from django.http import HttpRequest
from rest_framework import authentication, exceptions, throttling
from rest_framework.settings import api_settings


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
    """SimpleRateThrottle over the database cache, keyed by `client_address`.

    The rate is read when the throttle is made (per request), so a changed
    setting applies at once; a rate of None lifts the limit.
    """

    @property
    def cache(self) -> BaseCache:
        return caches[settings.THROTTLE_CACHE_ALIAS]

    def get_rate(self) -> str | None:
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_ident(self, request: Any) -> str:
        return client_address(request)


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
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        if len(self.history) < self.num_requests:
            return None
        return self.wait() or 1.0

    def record_failure(self, request: Any) -> None:
        """Count one failed authentication of the request's address."""
        if self.rate is not None:
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
