"""A namespace host's TCP relay, run as its own process: `python relay.py NETNS PORT...`.

Listens on 127.0.0.1:PORT inside the network namespace NETNS for each PORT and
relays every connection to the machine's 127.0.0.1:PORT (the listeners are made
after joining NETNS, the outgoing connections after joining back the machine's
namespace; a socket keeps the namespace it was made in). Prints "ready" once
listening. Threads: one accept loop per port, two pumps per connection, in a
process of its own so the relayed traffic does not wait for the test's own
interpreter lock (tests/integration/multi_host.py's `Forwarder` starts it).
It dies with its parent (PR_SET_PDEATHSIG); a kill cuts every relayed connection
as a dead machine's would. It imports only devstack.netns (HelperProcess puts the
repository on its path).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading

from devstack.netns import die_with_parent, setns


def listen_inside(netns: str, ports: list[int]) -> list[socket.socket]:
    """Listeners on 127.0.0.1 of `netns` for `ports`; the process is back in its own
    namespace on return. Call before any thread starts (setns moves the calling thread)."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        setns(target)
        try:
            listeners = []
            for port in ports:
                listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                listener.bind(("127.0.0.1", port))
                listener.listen(256)
                listeners.append(listener)
        finally:
            setns(home)
    finally:
        os.close(home)
        os.close(target)
    return listeners


def accept(listener: socket.socket, port: int) -> None:
    while True:
        try:
            inner, _ = listener.accept()
        except OSError:
            return
        try:
            outer = socket.create_connection(("127.0.0.1", port), timeout=5)
            outer.settimeout(None)
        except OSError:
            inner.close()  # the service is down (a broker restart): refused, as it would be
            continue
        for sock in (inner, outer):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = Pair(inner, outer)
        for src, dst in ((inner, outer), (outer, inner)):
            threading.Thread(target=pump, args=(pair, src, dst), daemon=True).start()


class Pair:
    """A relayed connection's two sockets, closed once both pumps have ended (not before:
    a closed descriptor's number may be reused while the other pump still writes)."""

    def __init__(self, inner: socket.socket, outer: socket.socket) -> None:
        self.sockets = (inner, outer)
        self.pumps = 2
        self.lock = threading.Lock()

    def pump_ended(self) -> None:
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self.lock:
            self.pumps -= 1
            last = self.pumps == 0
        if last:
            for sock in self.sockets:
                sock.close()


def pump(pair: Pair, src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    pair.pump_ended()


def main(argv: list[str]) -> None:
    die_with_parent()
    netns, ports = argv[0], [int(port) for port in argv[1:]]
    listeners = listen_inside(netns, ports)
    threads = [
        threading.Thread(target=accept, args=(listener, port), daemon=True)
        for listener, port in zip(listeners, ports, strict=True)
    ]
    for thread in threads:
        thread.start()
    print("ready", flush=True)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main(sys.argv[1:])
