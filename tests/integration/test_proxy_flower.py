"""Issue 18, items 8 and 9: Flower behind the proxy, rate-limited, its /metrics internal.

A real Flower (the Procfile's command, FLOWER_URL_PREFIX=flower, its own
redis-server) and Debian's nginx with platform/nginx/'s template. 200 wrong
passwords at full speed: all 401 from bare Flower (the before), mostly 429
through the proxy (NGINX_FLOWER_RATE 5r/s, NGINX_FLOWER_BURST 20), and the
right password works again once the burst has drained.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from devstack.nginx import NginxServer, limits_from_env
from devstack.processes import Stack
from devstack.services import RedisServer, free_port, wait_for
from tests.integration.harness import BASE_ENV

pytestmark = pytest.mark.integration

AUTH = ("ops", "right-password")
WRONG = ("ops", "wrong-password")
ATTEMPTS = 200
HTTP_TIMEOUT = 10


@dataclass
class Proxied:
    """Flower's own base URL (http://127.0.0.1:port/flower) and a fresh proxy in front."""

    flower: str
    proxy: NginxServer

    @property
    def public(self) -> str:
        return f"{self.proxy.url}/flower"


@pytest.fixture(scope="module")
def flower(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Flower's own base URL, under its prefix (the Procfile's command, its own Redis)."""
    workdir = tmp_path_factory.mktemp("proxy-flower")
    redis = RedisServer().start()
    stack = Stack(
        env={
            **BASE_ENV,
            "REDIS_URL": redis.url,
            "CELERY_BROKER_URL": redis.url,
            "FLOWER_BASIC_AUTH": ":".join(AUTH),
            "FLOWER_URL_PREFIX": "flower",
            "FLOWER_DB": str(workdir / "flower.db"),
        },
        logdir=workdir / "logs",
    )
    port = free_port()
    try:
        process = stack.start("flower", "--address=127.0.0.1", f"--port={port}")
        own = f"http://127.0.0.1:{port}/flower"

        def up() -> bool:
            assert process.alive(), process.log()[-3000:]
            try:
                return requests.get(f"{own}/healthcheck", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        wait_for(up, timeout=90, interval=0.25, what="flower")
        yield own
    finally:
        stack.stop(timeout=5)
        redis.stop()


@pytest.fixture
def proxied(flower: str, tmp_path: Path) -> Iterator[Proxied]:
    """The shipped proxy in front of Flower, its rate limit untouched by other tests."""
    proxy = NginxServer(
        port=free_port(),
        # No web here: its locations answer 502, which no test asks for.
        web=f"127.0.0.1:{free_port()}",
        flower=flower.removeprefix("http://").removesuffix("/flower"),
        workdir=tmp_path / "nginx",
    )
    with proxy:
        yield Proxied(flower, proxy)


def burst(url: str, *, attempts: int = ATTEMPTS) -> tuple[Counter[int], float]:
    """GET `url` with a wrong password `attempts` times, 40 at a time; (statuses, seconds)."""
    local = threading.local()

    def attempt(_: int) -> int:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return local.session.get(url, auth=WRONG, timeout=HTTP_TIMEOUT).status_code

    with ThreadPoolExecutor(max_workers=40) as pool:
        started = time.monotonic()
        statuses = Counter(pool.map(attempt, range(attempts)))
        return statuses, time.monotonic() - started


def wait_drained(url: str) -> None:
    """Wait until the right password is let through again (the burst has drained)."""
    wait_for(
        lambda: requests.get(url, auth=AUTH, timeout=HTTP_TIMEOUT).status_code == 200,
        timeout=30,
        interval=0.5,
        what="the rate limit to let the right password through",
    )


def test_bare_flower_answers_every_wrong_password_at_full_speed(proxied: Proxied) -> None:
    # given Flower published directly, as compose did before the proxy
    statuses, seconds = burst(f"{proxied.flower}/")
    print(f"bare Flower: {dict(statuses)} in {seconds:.2f} s")
    # then every guess is checked: 401 each (the before)
    assert statuses == Counter({401: ATTEMPTS})


def test_behind_the_proxy_wrong_flower_passwords_mostly_get_429(proxied: Proxied) -> None:
    rate = float(limits_from_env()["NGINX_FLOWER_RATE"].removesuffix("r/s"))
    allowed_burst = int(limits_from_env()["NGINX_FLOWER_BURST"])
    # when 200 wrong passwords arrive at once through the proxy
    statuses, seconds = burst(f"{proxied.public}/")
    print(f"through nginx: {dict(statuses)} in {seconds:.2f} s")
    # then only the burst and the steady rate reach Flower; the rest get 429
    assert set(statuses) <= {401, 429}, statuses
    assert statuses[401] <= allowed_burst + rate * seconds + 2, (statuses, seconds)
    assert statuses[429] > ATTEMPTS / 2, statuses
    # and Flower's static files are not counted (they carry no password)
    page = requests.get(f"{proxied.flower}/", auth=AUTH, timeout=HTTP_TIMEOUT).text
    static = page.split('href="/flower/static/', 1)[1].split('"', 1)[0]
    asset = requests.get(f"{proxied.proxy.url}/flower/static/{static}", timeout=HTTP_TIMEOUT)
    assert asset.status_code == 200
    # and the right password works again once the burst has drained
    wait_drained(f"{proxied.public}/")


def test_flowers_ui_works_through_the_proxy(proxied: Proxied) -> None:
    bare = requests.get(proxied.public, allow_redirects=False, timeout=HTTP_TIMEOUT)
    assert (bare.status_code, bare.headers["Location"]) == (301, "/flower/")
    assert requests.get(f"{proxied.public}/", timeout=HTTP_TIMEOUT).status_code == 401
    page = requests.get(f"{proxied.public}/", auth=AUTH, timeout=HTTP_TIMEOUT)
    assert page.status_code == 200
    assert 'href="/flower/static/' in page.text
    workers = requests.get(f"{proxied.public}/api/workers", auth=AUTH, timeout=HTTP_TIMEOUT)
    assert workers.status_code == 200, workers.text[:300]


def test_flowers_metrics_are_served_on_its_own_port_and_not_through_the_proxy(
    proxied: Proxied,
) -> None:
    # given Prometheus's target: Flower's own port
    own = requests.get(f"{proxied.flower}/metrics", timeout=HTTP_TIMEOUT)
    assert own.status_code == 200
    assert "# TYPE flower_events" in own.text
    # then no spelling of it is routed from the public port
    for path in (
        "/flower/metrics",
        "/flower/metrics/",
        "/flower/metrics?x=1",
        "/flower//metrics",
        "/flower/./metrics",
        "/flower/%6Detrics",
        "/flower/static/../metrics",
    ):
        with socket.create_connection(("127.0.0.1", proxied.proxy.port), timeout=10) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        assert not answer.startswith(b"HTTP/1.1 200"), (path, answer[:200])
        assert b"# TYPE" not in answer, path
