"""The ``gateway`` command: ``check`` a configuration, print the ``version``."""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.cli.check import run_check


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gateway",
        description="Identity-aware access proxy. Run the daemon with "
        "`twistd -n gateway --config FILE`.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    check = commands.add_parser(
        "check", help="validate a configuration and summarise it",
        description="Validate a configuration file together with the environment, as the "
        "daemon would. Prints every problem (exit 1) or a one-line summary (exit 0).",
    )
    check.add_argument("--config", "-c", metavar="FILE", help="configuration file")
    commands.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "check":
        return run_check(args.config, sys.stdout, sys.stderr)
    if args.command == "version":
        print(f"gateway {__version__} (Python {platform.python_version()})")
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
