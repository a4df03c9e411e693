"""Connections waiting for their person to confirm a sign-in, woken by the databroker's
change stream (``databroker/follower.py``) rather than each reading the store over and
over: the confirmation page writes the session id into the ticket's record, possibly in
another process, and the change that brings it here fires the waiting connections'
Deferreds.

A wait reads the ticket once when it starts (a confirmation made before it subscribed is
not in the stream's future), then lasts until the ticket is confirmed, expires (its 5
minutes run from the first ask, however often it is shown) or is deleted, or until its
connection is done with it (``stop``: it ended, or asked no more). Nothing is left
behind: its timer is cancelled and its entry removed however it ends. A restarted
change stream (``reset``: this process fell behind, or the store was emptied) may have
skipped the confirmation: each ticket waited on is read once again then.

How soon a confirmation arrives is the change stream's: at once for a memory store (its
writes kick the follower), with the next batch for a databroker reached over gRPC (its
watch kicks it), within the follower's interval for Redis.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gateway.databroker.follower import ChangeFollower
from gateway.databroker.records import SSH_SIGN_IN, Record, RecordStore
from gateway.databroker.ssh_records import PendingSignIn, read_sign_in, sign_in_of

log = Logger(namespace="gateway.ssh")


class SignInWaits:
    def __init__(self, records: RecordStore, clock: IReactorTime, changes: ChangeFollower
                 ) -> None:
        self.records = records
        self.clock = clock
        # ticket -> the waiting connections' Deferreds by the connection's id (one each;
        # usually one a ticket, two when a connection shown a ticket again waits beside
        # the first): a connection waiting is alive, so its id is its own
        self._waiting: dict[str, dict[int, Deferred[str]]] = {}
        changes.subscribe(SSH_SIGN_IN, self._changed)
        changes.on_reset(self._reset)

    def __len__(self) -> int:
        """How many connections wait."""
        return sum(len(waits) for waits in self._waiting.values())

    async def wait(self, ticket: str, connection: object) -> str:
        """The session id that confirmed ``ticket``; "" when it expired or was deleted,
        or ``stop`` ended the wait. The store's failure to answer the first read is
        raised."""
        done: Deferred[str] = Deferred()
        waits = self._waiting.setdefault(ticket, {})
        if id(connection) in waits:
            raise ValueError("one wait per connection and ticket")
        waits[id(connection)] = done  # before the read: a change meanwhile is not missed
        timer: IDelayedCall | None = None
        try:
            now = self.clock.seconds()
            pending = await read_sign_in(self.records, ticket, now)
            if not done.called:
                if pending is None:
                    self._fire(ticket, id(connection), "")
                elif pending.session_id:
                    self._fire(ticket, id(connection), pending.session_id)
                else:
                    timer = self.clock.callLater(max(pending.expires_at - now, 0.0),
                                                 self._fire, ticket, id(connection), "")
            return await done
        finally:
            if timer is not None and timer.active():
                timer.cancel()
            self._forget(ticket, id(connection))

    def stop(self, ticket: str, connection: object) -> None:
        """``connection`` is done with ``ticket``: its wait, if any, ends with ""."""
        self._fire(ticket, id(connection), "")

    def _fire(self, ticket: str, key: int, session_id: str) -> None:
        done = self._forget(ticket, key)
        if done is not None and not done.called:
            done.callback(session_id)

    def _forget(self, ticket: str, key: int) -> Deferred[str] | None:
        waits = self._waiting.get(ticket)
        if waits is None:
            return None
        done = waits.pop(key, None)
        if not waits:
            del self._waiting[ticket]
        return done

    def _changed(self, record: Record) -> None:
        """A sign-in record changed (here or in another process)."""
        if record.id in self._waiting:
            self._settle(record.id, sign_in_of(record, self.clock.seconds()))

    def _settle(self, ticket: str, pending: PendingSignIn | None) -> None:
        """Wake the waits on ``ticket`` if it is confirmed, or gone (``pending`` None);
        a ticket still pending changes nothing."""
        session_id = pending.session_id if pending is not None else ""
        if pending is not None and not session_id:
            return
        for key in list(self._waiting.get(ticket, {})):
            self._fire(ticket, key, session_id)

    def _reset(self) -> None:
        for ticket in list(self._waiting):
            ensureDeferred(self._read_again(ticket))

    async def _read_again(self, ticket: str) -> None:
        try:
            pending = await read_sign_in(self.records, ticket, self.clock.seconds())
        except Exception as exc:  # the waits go on: the next change or their timer
            log.warn("ssh: sign-in {ticket} could not be read again after the change "
                     "stream restarted: {error}", ticket=ticket[:6], error=str(exc))
            return
        if ticket in self._waiting:
            self._settle(ticket, pending)
