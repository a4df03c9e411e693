"""Connections from a penalised address (``penalty``), held unread for a while instead
of closed at once.

Closed at once, a refused connection invites the next: an attacker's reconnect loop
then runs as fast as the kernel accepts (in ``bench/h2abuse.py`` 14,000 connections a
second, and accepting and closing them took 70 % of the gateway's core). Held, a
connection costs a descriptor and a timer and no reading, and a loop that waits for an
answer waits ``HOLD_SECONDS``. At most ``HOLD_PER_ADDRESS`` connections of one address
and ``HOLD_TOTAL`` in all are held; past that a refused connection is closed at once.
A held connection is aborted (RST) when its time is up, without a byte written.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure

HOLD_SECONDS = 10.0
HOLD_PER_ADDRESS = 8
HOLD_TOTAL = 256


class Tarpit:
    """Counts the held connections; ``protocol`` gives one for a refused connection
    (None: close it at once)."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self.held: dict[str, int] = {}
        self.total = 0

    def protocol(self, address: str) -> Protocol | None:
        if self.total >= HOLD_TOTAL or self.held.get(address, 0) >= HOLD_PER_ADDRESS:
            return None
        return _Held(self, address)

    def _add(self, address: str) -> None:
        self.total += 1
        self.held[address] = self.held.get(address, 0) + 1

    def _remove(self, address: str) -> None:
        self.total -= 1
        left = self.held.get(address, 1) - 1
        if left > 0:
            self.held[address] = left
        else:
            self.held.pop(address, None)


class _Held(Protocol):
    def __init__(self, tarpit: Tarpit, address: str) -> None:
        self.tarpit = tarpit
        self.address = address
        self.timer: Any = None

    def connectionMade(self) -> None:
        transport: Any = self.transport
        transport.pauseProducing()  # nothing is read: the peer's bytes stay in the kernel
        self.tarpit._add(self.address)
        self.timer = self.tarpit.clock.callLater(HOLD_SECONDS, transport.abortConnection)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.timer is not None:
            if self.timer.active():
                self.timer.cancel()
            self.timer = None
            self.tarpit._remove(self.address)
