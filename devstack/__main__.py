"""`python -m devstack demo|up|observe|grafana-alerts`: what `make demo`, `make up` and `make observe` run."""

from __future__ import annotations

import argparse
import sys

from devstack import demo


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the command; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m devstack", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "demo", help="start the stack, run 500+ jobs through the API, print the table, stop"
    )
    commands.add_parser("up", help="web, worker, scheduler and Flower until Ctrl-C")
    commands.add_parser(
        "observe",
        help="`up` plus Debian's prometheus and alertmanager with platform/'s files, until Ctrl-C",
    )
    alerts = commands.add_parser(
        "grafana-alerts", help="write Grafana's alert rules from platform/prometheus/alerts.yml"
    )
    alerts.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args(argv)
    if args.command == "grafana-alerts":
        from devstack import grafana_alerts

        return grafana_alerts.main(check=args.check)
    if args.command == "observe":
        from devstack import observe

        return observe.run_observe()
    return demo.run_demo() if args.command == "demo" else demo.run_up()


if __name__ == "__main__":
    sys.exit(main())
