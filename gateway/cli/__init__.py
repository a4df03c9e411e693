"""The ``gateway`` command: ``check`` a configuration, ``policy check`` what a route
decides, open ``tcp`` tunnels, print the ``version``."""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence

from gateway import __version__
from gateway.cli.check import run_check
from gateway.cli.policy_inputs import EPILOG as POLICY_CHECK_EPILOG
from gateway.cli.policy_inputs import add_arguments as add_policy_check_arguments
from gateway.cli.policy_token import EPILOG as POLICY_TOKEN_EPILOG
from gateway.cli.policy_token import add_arguments as add_policy_token_arguments
from gateway.cli.tcp.options import EPILOG as TCP_EPILOG
from gateway.cli.tcp.options import add_arguments as add_tcp_arguments


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
    policy = commands.add_parser(
        "policy", help="ask what route policies decide",
        description="Ask what the route policies of a configuration decide.",
    )
    policy_commands = policy.add_subparsers(dest="policy_command", metavar="COMMAND")
    policy_check = policy_commands.add_parser(
        "check", help="the route, decision and rule-by-rule trace for a URL and a person",
        description="Print the route that serves a URL, what its policy decides for a\n"
        "person, request and instant, and the evaluation of every rule (hit, miss,\n"
        "not evaluated), with the daemon's own route lookup and evaluator.",
        epilog=f"{POLICY_CHECK_EPILOG}\n\n{POLICY_TOKEN_EPILOG}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_policy_check_arguments(policy_check)
    add_policy_token_arguments(policy_check)
    tcp = commands.add_parser(
        "tcp", help="tunnel a local port or stdin/stdout to a TCP service through the gateway",
        description="Open tunnels to a TCP service behind the gateway (a route from: "
        "tcp+https://host:port). Signs in through your browser when the gateway asks, and "
        "caches the token.",
        epilog=TCP_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_tcp_arguments(tcp)
    commands.add_parser("version", help="print the version")
    args = parser.parse_args(argv)
    if args.command == "check":
        return run_check(args.config, sys.stdout, sys.stderr)
    if args.command == "policy":
        if args.policy_command == "check":
            # the data plane's route lookup and the evaluator: only when needed
            from gateway.cli.policy_check import run_policy_check

            return run_policy_check(args, sys.stdout, sys.stderr)
        policy.print_help(sys.stderr)
        return 2
    if args.command == "tcp":
        from gateway.cli.tcp.run import run_tcp  # imports the reactor: only when needed

        return run_tcp(args)
    if args.command == "version":
        print(f"gateway {__version__} (Python {platform.python_version()})")
        return 0
    parser.print_help(sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
