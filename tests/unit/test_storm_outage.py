"""The outage scenario's table (bench.storm.outage.outage_table) and its destination stand-in."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from bench.storm.outage import Destination, OutageResult, outage_table
from devstack.loopback import LoopbackHTTPServer


def test_outage_table_puts_the_sides_side_by_side() -> None:
    on = OutageResult("fuse on", 50, 20.0, requests_down=8, succeeded=50, done_after_return=3.9)
    off = OutageResult("fuse off", 50, 20.0, requests_down=70, succeeded=10)
    off.left = {"retrying/retry_budget": 40}
    off.dead = {"budget": 3}
    lines = outage_table([on, off]).splitlines()
    assert lines[0].split() == ["fuse", "on", "fuse", "off"]
    rows = {line[:30].strip(): line[30:].split() for line in lines[1:]}
    assert rows["requests while down"] == ["8", "70"]
    assert rows["succeeded"] == ["50", "of", "50", "10", "of", "50"]
    assert rows["dead (reason: n)"] == ["0", "budget:", "3"]
    assert rows["all done after it returned"] == ["3.9", "s", "-"]


def test_outage_destination_refuses_until_up_at() -> None:
    dest = Destination()
    with LoopbackHTTPServer(0, dest.handler()) as server:
        url = f"http://127.0.0.1:{server.port}/hook"

        def post() -> int:
            request = urllib.request.Request(url, data=b"{}", method="POST")
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code

        assert post() == 503
        dest.up_at = time.time()
        assert post() == 200
    assert (dest.down, dest.up) == (1, 1)
