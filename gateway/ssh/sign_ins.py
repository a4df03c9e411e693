"""Pending sign-ins: a connection whose key is proven but not bound waits, with a ticket
in the databroker (``ssh.sign_in``/TICKET, ``SIGN_IN_SECONDS``), for its person to open
the link and confirm in a browser.

Anyone can make a key and prove it, so what a sign-in costs is bounded here, in the
process that serves the connection:

- a connection has one ticket (``auth`` asks the desk once; a repeated ask is shown the
  same link from memory);
- a connection with the same key, client address, route and login as a pending ticket
  gets that ticket again (someone who pressed Ctrl-C and connects again is shown the
  link they may already have opened; no new record);
- a ticket is pending, and counted, from its start until it expires (5 minutes, never
  extended) or its person is let in, whether or not its connection is still open (it
  may still be confirmed, and then binds the key for the next connection): at most
  ``ssh_max_pending_sign_ins_per_address`` per client address (an IPv6 client is its
  /64, as for the penalties) and ``ssh_max_pending_sign_ins`` in all. So the records a
  process writes are bounded however fast clients connect, not only per connection.

The counts are this process's own (with ``workers`` > 1, or several gateways on one
Redis, each has its share): a shared count would cost the databroker a write and a read
per sign-in, and the unauthenticated connections are bounded per process too. Plain
bookkeeping besides the records; the clock is the reactor's. A connection waits for its
confirmation through the change stream (``sign_in_waits``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger

from gateway.databroker.follower import ChangeFollower
from gateway.databroker.records import RecordStore
from gateway.databroker.ssh_records import SIGN_IN_SECONDS, start_sign_in
from gateway.dataplane.penalty import client_key
from gateway.ssh.metrics import PENDING_SIGN_INS, SIGN_INS_REFUSED
from gateway.ssh.sign_in_waits import SignInWaits

log = Logger(namespace="gateway.ssh")
REUSE_LEFT = 60.0  # a ticket with less time left than this is not shown again


class TooManySignIns(Exception):
    """A bound is reached: ``str(self)`` is the line the person reads; ``reason`` the
    label of ``gateway_ssh_sign_ins_refused_total`` (``address`` or ``total``)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Pending:
    address: str  # client_key of the client
    same: tuple[str, str, str, str]  # (fingerprint, address, route, login): shown again
    url: str
    expires_at: float


class PendingSignIns:
    """The pending tickets of this process, oldest first (each lives ``SIGN_IN_SECONDS``,
    so the oldest expires first), counted per client address."""

    def __init__(self, per_address: int, total: int) -> None:
        self.per_address = per_address
        self.total = total
        self.tickets: OrderedDict[str, _Pending] = OrderedDict()
        self.by_address: dict[str, int] = {}
        self.by_same: dict[tuple[str, str, str, str], str] = {}
        self.starting: dict[str, int] = {}  # reserved while their record is written

    def __len__(self) -> int:
        return len(self.tickets) + sum(self.starting.values())

    def expire(self, now: float) -> None:
        while self.tickets:
            ticket, pending = next(iter(self.tickets.items()))
            if pending.expires_at > now:
                return
            self.release(ticket)

    def find(self, same: tuple[str, str, str, str], now: float) -> tuple[str, str] | None:
        """(url, ticket) of a pending ticket for ``same`` with time left to use."""
        ticket = self.by_same.get(same)
        if ticket is None:
            return None
        pending = self.tickets[ticket]
        return (pending.url, ticket) if pending.expires_at - now >= REUSE_LEFT else None

    def reserve(self, address: str) -> str:
        """Hold a place for a ticket ``address`` is starting: "" when held, else why not
        (``address``: its bound is reached; ``total``: the process's)."""
        held = self.by_address.get(address, 0) + self.starting.get(address, 0)
        if held >= self.per_address:
            return "address"
        if len(self) >= self.total:
            return "total"
        self.starting[address] = self.starting.get(address, 0) + 1
        PENDING_SIGN_INS.inc()
        return ""

    def _unstart(self, address: str) -> None:
        left = self.starting[address] - 1
        if left:
            self.starting[address] = left
        else:
            del self.starting[address]

    def started(self, ticket: str, pending: _Pending) -> None:
        self._unstart(pending.address)
        self.tickets[ticket] = pending
        self.by_address[pending.address] = self.by_address.get(pending.address, 0) + 1
        self.by_same[pending.same] = ticket

    def failed(self, address: str) -> None:
        """The record of a reserved ticket could not be written."""
        self._unstart(address)
        PENDING_SIGN_INS.dec()

    def release(self, ticket: str) -> None:
        pending = self.tickets.pop(ticket, None)
        if pending is None:
            return
        left = self.by_address[pending.address] - 1
        if left:
            self.by_address[pending.address] = left
        else:
            del self.by_address[pending.address]
        if self.by_same.get(pending.same) == ticket:
            del self.by_same[pending.same]
        PENDING_SIGN_INS.dec()


class SignInDesk:
    """The sign-in part of the SSH ``Gate``: starts (or shows again) a pending sign-in,
    waits for its confirmation (``changes``: the databroker's change stream), and
    releases it once its person is let in. ``origin()`` is the authenticate service's
    origin (the sign-in page's), read at each start so that a reload takes effect."""

    def __init__(self, records: RecordStore, reactor: Any, changes: ChangeFollower,
                 origin: Callable[[], str], page: str, per_address: int, total: int
                 ) -> None:
        self.records = records
        self.reactor = reactor
        self.origin = origin
        self.page = page
        self.pending = PendingSignIns(per_address, total)
        self.waits = SignInWaits(records, reactor, changes)

    def configure(self, per_address: int, total: int) -> None:
        """A reload's bounds: for new sign-ins (pending ones are not ended)."""
        self.pending.per_address = per_address
        self.pending.total = total

    async def start(self, client: str, route: str, login: str, key_fingerprint: str
                    ) -> tuple[str, str]:
        """(the URL to show, the ticket), or ``TooManySignIns``."""
        now = self.reactor.seconds()
        pending = self.pending
        pending.expire(now)
        address = client_key(client)
        same = (key_fingerprint, address, route, login)
        found = pending.find(same, now)
        if found is not None:
            log.info("ssh: sign-in shown again for key {fingerprint} from {client}",
                     fingerprint=key_fingerprint, client=client)
            return found
        refusal = pending.reserve(address)
        if refusal:
            SIGN_INS_REFUSED.labels(refusal).inc()
            log.info("ssh: sign-in refused for key {fingerprint} from {client}: the "
                     "{bound} bound on pending sign-ins ({limit}) is reached",
                     fingerprint=key_fingerprint, client=client, bound=refusal,
                     limit=pending.per_address if refusal == "address" else pending.total)
            raise TooManySignIns(refusal, "too many sign-ins are pending "
                                 + ("from your address" if refusal == "address"
                                    else "at the gateway")
                                 + "; finish one in the browser or try again later")
        try:
            record = await start_sign_in(self.records, key_fingerprint, client, route,
                                         login, now)
        except BaseException:
            pending.failed(address)
            raise
        url = f"{self.origin()}{self.page}{record.ticket}"
        pending.started(record.ticket, _Pending(address, same, url, now + SIGN_IN_SECONDS))
        log.info("ssh: sign-in started for key {fingerprint} from {client}",
                 fingerprint=key_fingerprint, client=client)
        return url, record.ticket

    async def wait(self, connection: object, ticket: str) -> str:
        """The session id that confirmed ``ticket`` ("": the connection ended its wait,
        ``end``, or the ticket expired: ``SIGN_IN_SECONDS`` after it started, however
        often it was shown)."""
        return await self.waits.wait(ticket, connection)

    def end(self, connection: object, ticket: str, confirmed: bool) -> None:
        """``connection`` is done with ``ticket`` (it ended, or was let in): its wait, if
        any, ends. A confirmed ticket is no longer pending (its record lives out its 5
        minutes, so that the page can be reloaded); an unconfirmed one stays pending
        until it expires: its person may still confirm it, and the same key connecting
        again is shown it."""
        self.waits.stop(ticket, connection)
        if confirmed:
            self.pending.release(ticket)
