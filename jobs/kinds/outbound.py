"""The one way a kind opens a client-supplied URL: connect only to the address that was checked.

`request(method, url, ...)` resolves the URL's host once and checks every
answer (jobs.kinds.netguard.resolve_destination), then sends the request
over a connection pinned to those addresses: the socket goes to a checked
address while the Host header, the TLS server name (SNI) and the
certificate's hostname check all use the name from the URL. Nothing in the
request path resolves the name again, so an answer that changes after the
check (DNS rebinding, TTL 0) is never connected to.

The session ignores the environment (`trust_env = False`): no HTTP(S)_PROXY
(a proxy would resolve the name itself, past our check), no netrc (a file
read and a lock at fork time, issue 19), no REQUESTS_CA_BUNDLE (certifi's
bundle verifies). Redirects are never followed here; a caller that follows
them calls `request` again per hop, so every hop is checked.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import requests
import requests.adapters
import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, LocationValueError, NewConnectionError
from urllib3.util.connection import create_connection

from jobs.kinds import netguard


class _PinnedConnectionMixin:
    """A urllib3 connection whose socket goes to `pinned_addresses`, never to a lookup of `host`.

    `host` stays the name from the URL, so http.client sends it as Host and
    urllib3 uses it as the TLS server name and for the hostname check.
    """

    host: str
    port: int
    timeout: Any
    source_address: tuple[str, int] | None
    socket_options: Any

    def __init__(self, *args: Any, pinned_addresses: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pinned_addresses = pinned_addresses

    def _new_conn(self) -> socket.socket:
        """A socket connected to the first pinned address that accepts, tried in order.

        Raises NewConnectionError (every address refused or unreachable, or
        none pinned) or ConnectTimeoutError, as urllib3's own connect does.
        """
        if not self.pinned_addresses:
            raise NewConnectionError(self, "no checked address to connect to")  # type: ignore[arg-type]
        error: Exception | None = None
        for address in self.pinned_addresses:
            where = self.host if address == self.host else f"{self.host} ({address})"
            try:
                # A numeric address: create_connection's getaddrinfo parses it, no DNS.
                return create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError as exc:
                error = ConnectTimeoutError(
                    self,
                    f"connection to {where} timed out (connect timeout={self.timeout})",
                )
                error.__cause__ = exc
            except OSError as exc:
                error = NewConnectionError(
                    self,  # type: ignore[arg-type]
                    f"failed to connect to {where}: {exc}",
                )
                error.__cause__ = exc
        assert error is not None
        raise error


class PinnedHTTPConnection(_PinnedConnectionMixin, HTTPConnection):
    pass


class PinnedHTTPSConnection(_PinnedConnectionMixin, HTTPSConnection):
    pass


class PinnedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = PinnedHTTPConnection


class PinnedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = PinnedHTTPSConnection


class _PinnedPoolManager(urllib3.PoolManager):
    """Hands out pools for the checked destination only, whose connections are pinned."""

    def __init__(self, destination: netguard.Destination, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.destination = destination
        self.pool_classes_by_scheme = {
            "http": PinnedHTTPConnectionPool,
            "https": PinnedHTTPSConnectionPool,
        }

    def _new_pool(
        self,
        scheme: str,
        host: str,
        port: int,
        request_context: dict[str, Any] | None = None,
    ) -> HTTPConnectionPool:
        if (host.strip("[]").lower(), port) != (
            self.destination.host.lower(),
            self.destination.port,
        ):
            # Fail closed: a connection to anything but the checked destination
            # (requests reports LocationValueError as InvalidURL).
            raise LocationValueError(
                f"{host}:{port} is not the checked destination "
                f"{self.destination.host}:{self.destination.port}"
            )
        context = dict(request_context if request_context is not None else self.connection_pool_kw)
        # Not part of the pool key (computed before this call): passed on to the connections.
        context["pinned_addresses"] = self.destination.addresses
        return super()._new_pool(scheme, host, port, context)


class PinnedAdapter(requests.adapters.HTTPAdapter):
    """A requests transport adapter that connects only to `destination`'s checked addresses."""

    def __init__(self, destination: netguard.Destination) -> None:
        self.destination = destination  # read by init_poolmanager, which __init__ calls
        super().__init__(max_retries=0)

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        self.poolmanager = _PinnedPoolManager(
            self.destination, num_pools=connections, maxsize=maxsize, block=block, **pool_kwargs
        )

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        # A proxy resolves the name itself, past our check.
        raise requests.exceptions.InvalidProxyURL("proxies are not used for checked destinations")


@contextmanager
def request(
    method: str,
    url: str,
    *,
    timeout: float | tuple[float, float],
    headers: Mapping[str, str] | None = None,
    json: Any = None,
    verify: bool | str = True,
) -> Iterator[requests.Response]:
    """The streamed response of one request to `url`, connected only to checked addresses.

    Redirects are not followed (a 3xx is returned). `verify` is requests'
    (True: certifi's bundle; a path: that CA bundle). Raises what
    netguard.resolve_destination raises (PermanentError, RetryableError)
    before any connection, and requests' errors after. The session and its
    connections are closed when the block ends.
    """
    destination = netguard.resolve_destination(url)
    with requests.Session() as session:
        session.trust_env = False
        adapter = PinnedAdapter(destination)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        with session.request(
            method,
            url,
            headers=dict(headers or {}),
            json=json,
            timeout=timeout,
            allow_redirects=False,
            stream=True,
            verify=verify,
        ) as response:
            yield response
