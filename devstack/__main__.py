"""`python -m devstack demo|up|observe|grafana-alerts`: what `make demo`, `make up` and `make observe` run."""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the exit code.

    SIGINT and SIGTERM stop any command as Ctrl-C does, from the first line
    on: SIGINT too, since a process started in the background inherits it
    ignored. Interrupted before a command's own handling starts (while
    importing), it exits 130 with one line, never a traceback.
    """
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _run(argv)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("[devstack] interrupted", file=sys.stderr, flush=True)
        return 130


def _run(argv: list[str] | None) -> int:

    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "demo", help="start the stack, run 500+ jobs through the API, print the table, stop"
    )
    commands.add_parser("up", help="web, worker, scheduler and Flower behind nginx until Ctrl-C")
    commands.add_parser(
        "observe",
        help="`up` plus Debian's prometheus and alertmanager with platform/'s files, until Ctrl-C",
    )
    alerts = commands.add_parser(
        "grafana-alerts", help="write Grafana's alert rules from platform/prometheus/alerts.yml"
    )
    alerts.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    # Each command's modules are imported here, after the signal handlers
    # (import cost: Django's settings, redis, requests).
    if args.command == "grafana-alerts":
        from devstack import grafana_alerts  # noqa: PLC0415 - import cost: each command's own modules

        return grafana_alerts.main(check=args.check)
    if args.command == "observe":
        from devstack import observe  # noqa: PLC0415 - import cost: each command's own modules

        return observe.run_observe()
    if args.command == "up":
        from devstack import up  # noqa: PLC0415 - import cost: each command's own modules

        return up.run_up()
    from devstack import demo  # noqa: PLC0415 - import cost: each command's own modules

    return demo.run_demo()


if __name__ == "__main__":
    sys.exit(main())
