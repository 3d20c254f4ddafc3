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
* `resolve_destination` at run time: the host is resolved once and every
  answer checked; the result (a Destination) is what jobs.kinds.outbound
  connects to, by address, so the HTTP client never resolves the name again
  (no DNS rebinding between check and connect). Every redirect hop is a new
  destination, resolved and checked again.

What it does not cover: a public address that forwards to an internal one
(an open proxy, a NAT rule on the path) and names the platform resolves
differently from the caller are outside what an address check can see; an
egress firewall is the complete answer (platform/README.md, Security model).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

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


def _is_ip_literal(host: str) -> bool:
    """True for a host written as an IPv4 or IPv6 address in standard form (no lookup needed)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_localhost_name(host: str) -> bool:
    # RFC 6761 §6.3: "localhost." and names below it are loopback names.
    name = host.rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")


def literal_destination_error(url: str) -> str | None:
    """Why `url` may not be submitted, or None. Submit-time check; never does DNS.

    Only a host that is a numeric address (any form getaddrinfo accepts with
    AI_NUMERICHOST, e.g. "127.0.0.1", "[::1]") or a localhost name is judged
    here; other names are checked when the attempt runs (`resolve_destination`).
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


@dataclass(frozen=True)
class Destination:
    """Where a URL's request goes: the host as named (for Host, SNI and the
    certificate check), its port, and the addresses checked for it, in answer
    order (connect to these and nothing else)."""

    host: str
    port: int
    addresses: tuple[str, ...]


def resolve_destination(url: str) -> Destination:
    """Resolve `url`'s host once and check every answer. Run-time check.

    Returns the Destination to connect to (jobs.kinds.outbound pins the
    connection to its addresses). Unless JOBS_ALLOW_PRIVATE_DESTINATIONS is
    true, raises PermanentError when the URL is unusable, the host is a
    localhost name (refused without a lookup) or any answer is not public
    (`is_public_address`): the whole name is refused, not just that answer.
    Raises RetryableError when the name does not resolve (DNS failures may be
    transient, as a connection error is).
    """
    try:
        host, port = _host_and_port(url)
    except ValueError as exc:
        raise PermanentError(f"destination is not a usable URL: {exc}") from exc
    allowed = private_destinations_allowed()
    if not allowed and _is_localhost_name(host):
        raise PermanentError(
            f"destination {host!r} is a loopback name; private destinations are not allowed"
        )
    try:
        addresses = [host] if _is_ip_literal(host) else resolve(host, port)
    except (socket.gaierror, UnicodeError) as exc:
        raise RetryableError(f"cannot resolve {host!r}: {exc}") from exc
    if not addresses:
        raise RetryableError(f"cannot resolve {host!r}: no addresses")
    refused = [] if allowed else _non_public(addresses)
    if refused:
        raise PermanentError(
            f"destination {host!r} resolves to a non-public address ({', '.join(refused)}); "
            "private destinations are not allowed (JOBS_ALLOW_PRIVATE_DESTINATIONS)"
        )
    return Destination(host=host, port=port, addresses=tuple(addresses))
