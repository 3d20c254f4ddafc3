"""A local HTTP server that notes the time of every POST, run as its own process:
`python request_clock.py FILE` prints its port, then answers 200 to every POST and
appends a line to FILE per request: its arrival (epoch seconds, the machine's clock), its
X-Job-Id header (`-` without one) and its path.

A process of its own so that an arrival is noted when it comes, not when the test's
interpreter lock frees (the rate-limit soak counts these times). It dies with its parent
(devstack.netns.die_with_parent).
"""

from __future__ import annotations

import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from devstack.netns import die_with_parent


class Clock(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(BaseHTTPRequestHandler):
    server: Clock

    def do_POST(self) -> None:
        now = time.time()
        with self.server.lock:
            job_id = self.headers.get("X-Job-Id", "-")
            self.server.out.write(f"{now:.6f} {job_id} {self.path}\n")
            self.server.out.flush()
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:  # quiet: thousands of requests
        return


def main(path: str) -> None:
    die_with_parent()
    with open(path, "a", encoding="ascii") as out:
        server = Clock(out)
        print(server.server_address[1], flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
