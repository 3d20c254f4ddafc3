"""`python -m devstack demo|up`: what `make demo` and `make up` run."""

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
    args = parser.parse_args(argv)
    return demo.run_demo() if args.command == "demo" else demo.run_up()


if __name__ == "__main__":
    sys.exit(main())
