"""``gateway tcp``: run the reactor for a listener (``--listen ADDR``) or for one tunnel
on stdin/stdout (``--listen -``), and turn how it ended into an exit status.

Exit statuses: 0 the tunnel ended (or the listener was stopped with Ctrl-C), 1 the
tunnel or the listener could not be opened, 2 bad arguments, 130 interrupted before a
stdin/stdout tunnel ended.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
from typing import Any, TextIO

from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory
from twisted.python.failure import Failure

from gateway.cli.tcp.client import TunnelClient
from gateway.cli.tcp.local import LocalSide, Outcome
from gateway.cli.tcp.options import Address, TunnelOptions, UsageProblem, tunnel_options
from gateway.cli.tcp.stdio import StdioEnds

PREFIX = "gateway tcp: "


class Console:
    """Human messages on stderr (stdout may be the tunnel itself)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def say(self, message: str) -> None:
        self.stream.write(PREFIX + message + "\n")
        self.stream.flush()

    def warn(self, message: str) -> None:
        self.say("warning: " + message)


class ListenOutcome(Outcome):
    """One line per tunnel opened, refused or closed, naming the local peer."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @staticmethod
    def _peer(side: LocalSide) -> str:
        peer = side.transport.getPeer()
        return f"{getattr(peer, 'host', '?')}:{getattr(peer, 'port', '?')}"

    def opened(self, side: LocalSide) -> None:
        self.console.say(f"{self._peer(side)}: tunnel open")

    def failed(self, side: LocalSide, message: str) -> None:
        self.console.say(f"{self._peer(side)}: {message}")

    def closed(self, side: LocalSide, reason: str) -> None:
        pipe = side.pipe
        moved = f", {pipe.sent_to_b} bytes sent, {pipe.sent_to_a} received" if pipe else ""
        self.console.say(f"{self._peer(side)}: tunnel closed ({reason}{moved})")


class StdioOutcome(Outcome):
    """The one tunnel of ``--listen -``: its end is the end of the process."""

    def __init__(self, reactor: Any, console: Console) -> None:
        self.reactor = reactor
        self.console = console
        self.code: int | None = None

    def failed(self, side: LocalSide, message: str) -> None:
        self.console.say(message)
        self.code = 1

    def gone(self, side: LocalSide) -> None:
        if self.code is None:
            self.code = 0
        if self.reactor.running:
            self.reactor.stop()


def _server_endpoint(reactor: Any, listen: Address) -> Any:
    if ipaddress.ip_address(listen.host).version == 6:
        return TCP6ServerEndpoint(reactor, listen.port, interface=listen.host)
    return TCP4ServerEndpoint(reactor, listen.port, interface=listen.host)


def run_listen(reactor: Any, client: TunnelClient, listen: Address, console: Console) -> int:
    options = client.options
    outcome = ListenOutcome(console)
    factory = Factory.forProtocol(
        lambda: LocalSide(reactor, client.open, client.half_close, outcome))
    failed: list[str] = []

    def listening(port: IListeningPort) -> None:
        bound = port.getHost()
        address = Address(getattr(bound, "host", listen.host), getattr(bound, "port", 0))
        console.say(f"listening on {address} for {options.destination} through "
                    f"{options.gateway.origin} (Ctrl-C to stop)")
        if not ipaddress.ip_address(address.host).is_loopback:
            console.warn(f"{address.host} is not a loopback address: whoever reaches it can "
                         "use the tunnel as you")

    def not_listening(failure: Failure) -> None:
        failed.append(f"cannot listen on {listen}: {failure.getErrorMessage()}")
        reactor.stop()

    reactor.callWhenRunning(lambda: _server_endpoint(reactor, listen).listen(factory)
                            .addCallbacks(listening, not_listening))
    reactor.run()
    if failed:
        console.say(failed[0])
        return 1
    return 0


def run_stdio(reactor: Any, client: TunnelClient, console: Console) -> int:
    outcome = StdioOutcome(reactor, console)
    side = LocalSide(reactor, client.open, client.half_close, outcome)
    reactor.callWhenRunning(StdioEnds, side, reactor=reactor)
    reactor.run()
    if outcome.code is None:
        console.say("interrupted")
        return 130
    return outcome.code


def run_tcp(args: argparse.Namespace, stderr: TextIO | None = None) -> int:
    console = Console(stderr or sys.stderr)
    try:
        options: TunnelOptions = tunnel_options(args)
    except UsageProblem as exc:
        console.say(str(exc))
        return 2
    from twisted.internet import reactor  # the CLI entry is where the reactor is chosen

    if options.gateway.tls and not options.verify_tls:
        console.warn("TLS verification of the gateway is disabled "
                     "(--disable-tls-verification): anyone on the path can read the tunnel")
    client = TunnelClient(reactor, options, console.say, console.warn)
    if options.listen is None:
        return run_stdio(reactor, client, console)
    return run_listen(reactor, client, options.listen, console)
