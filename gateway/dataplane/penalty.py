"""Client addresses whose HTTP/2 connections keep being cut are refused for a while.

Each limit of ``http2/guard`` bounds what one connection costs, but an attacker
reconnects after every cut (a rapid-reset script does it thousands of times a second),
and the bounded costs add up to a busy core. So every cut is a strike against the
client's address: ``STRIKES`` strikes within ``STRIKE_WINDOW`` seconds and its new
connections are refused for ``PENALTY`` seconds,
doubling each time it starts again (up to ``MAX_PENALTY``); connections it already has
are left alone. Cuts for slowness (``timeout_read``, ``timeout_write``: a bad network)
are no strike.

An IPv6 client is its /64 (one host commonly holds all of it). Behind a load balancer
with ``use_proxy_protocol`` the client is the address its PROXY header gives. Clients
behind one NAT share the penalty of any of them: the price of keying by address, as
every per-address limit pays. At most ``MAX_CLIENTS`` addresses are remembered; past
that the calm ones are forgotten first. Plain bookkeeping: no I/O, no clock of its own.

The native SSH server keeps a ``Penalties`` of its own with its own strikes (rules an
honest SSH client never breaks: ``gateway.ssh.transport``), so that the two protocols
share the bookkeeping and not each other's penalties.

The conformance test (``tests/integration/test_h2spec.py``) runs h2spec's 146 cases
from 127.0.0.1 against one daemon, and most of them end in a cut by design: with
strikes counted, every case after the third would be refused at the accept. So the
environment variable ``GATEWAY_TEST_ONLY_NO_PENALTY=1`` (exactly ``1``) turns the
strikes off. It is an environment variable, not a setting, so that no config file can
turn the defence off, and its name says what it is for; each core that starts with it
logs a warning.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping

from twisted.logger import Logger

STRIKES = 3
STRIKE_WINDOW = 30.0
PENALTY = 10.0
MAX_PENALTY = 300.0
MAX_CLIENTS = 10_000
NOT_STRIKES = frozenset({"timeout_read", "timeout_write"})
TEST_ONLY_SWITCH = "GATEWAY_TEST_ONLY_NO_PENALTY"
log = Logger()


def switched_off(environ: Mapping[str, str]) -> bool:
    """Whether the test-only switch is set in ``environ``: only the exact value ``1``
    counts (an empty, ``0`` or ``false`` left over in a unit file does not)."""
    return environ.get(TEST_ONLY_SWITCH) == "1"


class _Record:
    __slots__ = ("penalties", "strikes", "until")

    def __init__(self) -> None:
        self.strikes: list[float] = []  # when the last (up to STRIKES) cuts were
        self.until = 0.0  # refused until then
        self.penalties = 0  # penalties in a row (each one twice as long)


def client_key(address: str) -> str:
    """The address a penalty applies to: IPv4 as it is, IPv6 by its /64."""
    if ":" not in address:
        return address
    try:
        ip = ipaddress.IPv6Address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.IPv6Network((ip, 64), strict=False))


class Penalties:
    """Strikes and refusals per client address. ``environ`` is where the test-only
    switch is looked for (the process environment unless given); ``clients`` names
    whose they are in its warning (the SSH server keeps a ``Penalties`` of its own,
    ``gateway.ssh.transport``, with strikes of its own)."""

    def __init__(self, environ: Mapping[str, str] | None = None,
                 clients: str = "HTTP/2 clients whose connections keep being cut") -> None:
        self._clients: dict[str, _Record] = {}
        self.refused = 0  # connections refused, in all
        self.off = switched_off(os.environ if environ is None else environ)
        if self.off:
            log.warn("{switch}=1: {clients} are NOT refused. This is for conformance "
                     "tests only; never set it in production", switch=TEST_ONLY_SWITCH,
                     clients=clients)

    def __len__(self) -> int:
        return len(self._clients)

    def strike(self, address: str, limit: str, now: float) -> float | None:
        """A connection from ``address`` was cut for ``limit``; the length of the
        penalty this starts, or None."""
        if limit in NOT_STRIKES or not address or self.off:
            return None
        key = client_key(address)
        record = self._clients.get(key)
        if record is None:
            if len(self._clients) >= MAX_CLIENTS:
                self._forget_calm(now)
            record = self._clients[key] = _Record()
        strikes = record.strikes
        strikes.append(now)
        if len(strikes) > STRIKES:
            del strikes[0]
        if len(strikes) < STRIKES or now - strikes[0] > STRIKE_WINDOW or now < record.until:
            return None
        if now > record.until + MAX_PENALTY:
            record.penalties = 0  # calm long enough since the last one: start over
        record.penalties += 1
        strikes.clear()
        seconds: float = min(PENALTY * 2.0 ** (record.penalties - 1), MAX_PENALTY)
        record.until = now + seconds
        return seconds

    def refuses(self, address: str, now: float) -> bool:
        """Whether a new connection from ``address`` is refused now (and count it)."""
        if not self._clients:
            return False
        record = self._clients.get(client_key(address))
        if record is None or now >= record.until:
            return False
        self.refused += 1
        return True

    def _forget_calm(self, now: float) -> None:
        """Drop the records that neither refuse nor hold strikes; if every one does,
        the oldest half (an attacker with many addresses must not grow the table)."""
        clients = self._clients
        calm = [key for key, r in clients.items()
                if now >= r.until and (not r.strikes or now - r.strikes[-1] > STRIKE_WINDOW)]
        for key in calm:
            del clients[key]
        if len(clients) >= MAX_CLIENTS:
            for key in list(clients)[:MAX_CLIENTS // 2]:
                del clients[key]
