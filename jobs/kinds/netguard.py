"""Outbound-request guard against server-side request forgery (SSRF).

Kinds that fetch a client-supplied http(s) URL (`webhook.deliver`,
`report.csv_summary`) must not become a way to reach the platform's own
network: Redis on 127.0.0.1:6379, a cloud metadata service on
169.254.169.254, internal services on RFC 1918 addresses. Unless
settings.JOBS_ALLOW_PRIVATE_DESTINATIONS is true, a destination is refused
when any address it resolves to is not public (see `is_public_address`).

Two checks, two moments:

* `literal_destination_error` at submit time: a URL whose host is a literal
  IP address (or an RFC 6761 "localhost" name) that is not public is
  rejected at once, so the API answers 400. No DNS lookup happens here.
* `check_destination` at run time, right before connecting: the host is
  resolved with socket.getaddrinfo (as the HTTP client will) and the
  attempt fails with PermanentError when any answer is not public.

Not covered: DNS rebinding. The HTTP client resolves the name again when it
connects, so a name whose answers change between our check and that connect
(a short TTL, a hostile resolver) can still reach a private address. Closing
that gap needs connect-time pinning: connecting to the very address that was
checked (a custom transport adapter), or an egress proxy or firewall that
enforces the rule. An HTTP(S)_PROXY in the environment also moves the
connect to the proxy, which then resolves the name itself.
"""

from __future__ import annotations

import ipaddress
import socket

import requests
import urllib3.util
from django.conf import settings

from jobs.kinds.base import PermanentError, RetryableError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def private_destinations_allowed() -> bool:
    """settings.JOBS_ALLOW_PRIVATE_DESTINATIONS; False (the safe answer) when unset."""
    return bool(getattr(settings, "JOBS_ALLOW_PRIVATE_DESTINATIONS", False))


def is_public_address(address: IPAddress) -> bool:
    """True when `address` is a globally routable unicast address.

    False for private (RFC 1918, RFC 4193), loopback, link-local, reserved,
    multicast, unspecified and shared (RFC 6598) addresses, and for IPv6
    addresses that embed such an IPv4 address (IPv4-mapped ::ffff:a.b.c.d,
    6to4 2002::/16).
    """
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            # ::ffff:a.b.c.d is the IPv4 host a.b.c.d, whatever ::ffff:0:0/96 is.
            return is_public_address(address.ipv4_mapped)
        if address.sixtofour is not None and not is_public_address(address.sixtofour):
            return False
    return address.is_global and not (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
    )


def _host_and_port(url: str) -> tuple[str, int]:
    """The host (IDNA-encoded, without IPv6 brackets) and port the HTTP client connects to.

    Parsed the way requests parses it (PreparedRequest, then urllib3), so the
    name checked is the name connected to. Raises ValueError when requests
    cannot use the URL.
    """
    try:
        prepared = requests.Request("GET", url).prepare().url or ""
        parsed = urllib3.util.parse_url(prepared)
    except (requests.RequestException, urllib3.exceptions.HTTPError, ValueError) as exc:
        raise ValueError(f"not a usable URL: {exc}") from exc
    host = (parsed.host or "").strip("[]")
    if not host:
        raise ValueError("URL has no host")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return host, port


def _addresses(infos: list[tuple]) -> list[str]:
    """Distinct address strings of getaddrinfo answers, in answer order."""
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def resolve(host: str, port: int) -> list[str]:
    """Distinct addresses `host` resolves to for a TCP connect, in answer order.

    socket.getaddrinfo with any address family, as urllib3 does; blocking.
    Raises socket.gaierror (or UnicodeError for a name IDNA cannot encode).
    """
    return _addresses(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def _non_public(addresses: list[str]) -> list[str]:
    """The entries of `addresses` that are not public (unparseable ones included)."""
    refused = []
    for text in addresses:
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            refused.append(text)
            continue
        if not is_public_address(address):
            refused.append(text)
    return refused


def _is_localhost_name(host: str) -> bool:
    # RFC 6761 §6.3: "localhost." and names below it are loopback names.
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def literal_destination_error(url: str) -> str | None:
    """Why `url` may not be submitted, or None. Submit-time check; never does DNS.

    Only a host that is a numeric address (any form getaddrinfo accepts with
    AI_NUMERICHOST, e.g. "127.0.0.1", "[::1]") or a localhost name is judged
    here; other names are checked when the attempt runs (`check_destination`).
    Always None when JOBS_ALLOW_PRIVATE_DESTINATIONS is true.
    """
    if private_destinations_allowed():
        return None
    try:
        host, port = _host_and_port(url)
    except ValueError:
        return None  # the URL validators own malformed URLs
    if _is_localhost_name(host):
        return f"host {host!r} is a loopback name; private destinations are not allowed"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (socket.gaierror, UnicodeError):
        return None  # a name, not a literal address
    refused = _non_public(_addresses(infos))
    if refused:
        return (
            f"host {host!r} is a non-public address ({', '.join(refused)}); "
            "private destinations are not allowed"
        )
    return None


def check_destination(url: str) -> None:
    """Refuse `url` unless every address its host resolves to is public. Run-time check.

    Resolves the host with `resolve` (blocking, like the HTTP client's own
    lookup); a localhost name is refused without a lookup. Does nothing when JOBS_ALLOW_PRIVATE_DESTINATIONS
    is true. Raises PermanentError when the URL is unusable or any resolved
    address is not public (`is_public_address`), RetryableError when the name
    does not resolve (DNS failures may be transient, as a connection error
    is). DNS rebinding between this check and the connect is not covered:
    see the module docstring.
    """
    if private_destinations_allowed():
        return
    try:
        host, port = _host_and_port(url)
    except ValueError as exc:
        raise PermanentError(f"destination {url!r}: {exc}") from exc
    if _is_localhost_name(host):
        raise PermanentError(
            f"destination {host!r} is a loopback name; private destinations are not allowed"
        )
    try:
        addresses = resolve(host, port)
    except (socket.gaierror, UnicodeError) as exc:
        raise RetryableError(f"cannot resolve {host!r}: {exc}") from exc
    refused = _non_public(addresses) if addresses else ["no addresses"]
    if refused:
        raise PermanentError(
            f"destination {host!r} resolves to a non-public address ({', '.join(refused)}); "
            "private destinations are not allowed (JOBS_ALLOW_PRIVATE_DESTINATIONS)"
        )
