"""Pending sign-ins: a connection whose key is proven but not bound waits, with one
ticket in the databroker (``ssh.sign_in``/TICKET), for its person to confirm in a
browser.

A pending sign-in holds an unauthenticated connection for up to ``SIGN_IN_WAIT``
instead of ``LOGIN_GRACE``, and a record in the databroker (shared with every process
over Redis), so both are bounded: one per connection (``auth`` asks the desk once and
answers a repeated ask with the same ticket), ``ssh_max_pending_sign_ins_per_address``
per client address and ``ssh_max_pending_sign_ins`` in all. The counts are this
process's own (with ``workers`` > 1 or several gateways each holds its share): counting
across processes would cost a shared write and read per ask, and each process's
unauthenticated connections are bounded per process too. A ticket ends with its
connection: the record is deleted when the connection ends unconfirmed, so such records
never outnumber the connections waiting on them (a confirmed one, which needs a signed-in
person's Allow, lives out its 5 minutes so that its page can be reloaded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import ensureDeferred
from twisted.internet.task import deferLater
from twisted.logger import Logger

from gateway.databroker.records import RecordStore
from gateway.databroker.ssh_records import end_sign_in, read_sign_in, start_sign_in
from gateway.dataplane.penalty import client_key
from gateway.ssh import limits
from gateway.ssh.metrics import PENDING_SIGN_INS, SIGN_INS_REFUSED

log = Logger(namespace="gateway.ssh")
POLL_SECONDS = 0.5  # how often a pending sign-in is looked at


class TooManySignIns(Exception):
    """The bound is reached: ``str(self)`` is the line the person reads; ``reason``
    the label of ``gateway_ssh_sign_ins_refused_total``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class PendingCounts:
    """Pending sign-ins per client address (an IPv6 client is its /64, as for the
    penalties) and in all. Plain bookkeeping."""

    def __init__(self, per_address: int, total: int) -> None:
        self.per_address = per_address
        self.total = total
        self.by_address: dict[str, int] = {}
        self.count = 0

    def reserve(self, address: str) -> str:
        """Take one for ``address``: "" when taken, else why not (``address``:
        its bound is reached; ``total``: the process's)."""
        key = client_key(address)
        if self.by_address.get(key, 0) >= self.per_address:
            return "address"
        if self.count >= self.total:
            return "total"
        self.by_address[key] = self.by_address.get(key, 0) + 1
        self.count += 1
        PENDING_SIGN_INS.inc()
        return ""

    def release(self, address: str) -> None:
        key = client_key(address)
        left = self.by_address.get(key, 0) - 1
        if left < 0:
            return
        if left:
            self.by_address[key] = left
        else:
            del self.by_address[key]
        self.count -= 1
        PENDING_SIGN_INS.dec()


class SignInDesk:
    """The sign-in part of the SSH ``Gate``: starts a connection's one pending sign-in,
    waits for its confirmation, and ends it with the connection. ``origin()`` is the
    authenticate service's origin (the sign-in page's), read at each start so that a
    reload takes effect."""

    def __init__(self, records: RecordStore, reactor: Any, origin: Callable[[], str],
                 page: str, per_address: int, total: int) -> None:
        self.records = records
        self.reactor = reactor
        self.origin = origin
        self.page = page
        self.counts = PendingCounts(per_address, total)

    def configure(self, per_address: int, total: int) -> None:
        """A reload's bounds: for new sign-ins (pending ones are not ended)."""
        self.counts.per_address = per_address
        self.counts.total = total

    async def start(self, client: str, route: str, login: str, key_fingerprint: str
                    ) -> tuple[str, str]:
        """(the URL to show, the ticket), or ``TooManySignIns``. Each start must be
        matched by one ``end`` with the same client once the connection is done."""
        refusal = self.counts.reserve(client)
        if refusal:
            SIGN_INS_REFUSED.labels(refusal).inc()
            log.info("ssh: sign-in refused for key {fingerprint} from {client}: "
                     "{bound} pending sign-ins reached", fingerprint=key_fingerprint,
                     client=client, bound=refusal,
                     limit=self.counts.per_address if refusal == "address"
                     else self.counts.total)
            raise TooManySignIns(refusal, "too many sign-ins are pending "
                                 + ("from your address" if refusal == "address"
                                    else "at the gateway")
                                 + "; finish one in the browser or try again later")
        try:
            pending = await start_sign_in(self.records, key_fingerprint, client, route,
                                          login, self.reactor.seconds())
        except BaseException:
            self.counts.release(client)
            raise
        log.info("ssh: sign-in started for key {fingerprint} from {client}",
                 fingerprint=key_fingerprint, client=client)
        return f"{self.origin()}{self.page}{pending.ticket}", pending.ticket

    async def wait(self, ssh: Any, ticket: str) -> str:
        """The session id that confirmed ``ticket`` ("": the connection is gone, or the
        ticket expired: ``SIGN_IN_SECONDS`` after it started, however often it was
        shown)."""
        for _ in range(int(limits.SIGN_IN_WAIT / POLL_SECONDS) + 1):
            await deferLater(self.reactor, POLL_SECONDS)
            wire: Any = ssh.transport
            if wire is None or getattr(wire, "disconnected", False):
                return ""
            pending = await read_sign_in(self.records, ticket, self.reactor.seconds())
            if pending is None:
                return ""
            if pending.session_id:
                return pending.session_id
        return ""

    def end(self, client: str, ticket: str, keep: bool = False) -> None:
        """The connection that started ``ticket`` is done (admitted, refused or gone):
        its count is released and, unless ``keep`` (a confirmed sign-in whose page
        may still be reloaded: its record lives out its 5 minutes), its record is
        deleted (the page then says the link has expired; connecting again starts a
        new sign-in)."""
        self.counts.release(client)
        if keep:
            return
        ensureDeferred(end_sign_in(self.records, ticket)).addErrback(
            lambda failure: log.failure("ssh: ending sign-in {ticket} failed", failure,
                                        ticket=ticket[:6]))
