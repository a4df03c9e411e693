"""This process's connections that outlive the request that opened them (CONNECT
tunnels, upgraded websocket and SPDY connections, native SSH connections), by the
session that admitted them, so that a session's end closes them at once.

The periodic re-authorization (``dataplane/exchange/recheck.py`` every second,
``ssh/service.py`` every ``RECHECK_SECONDS``) stays the rule for everything a
decision rests on (policy edits, certificates, expiry); it answers a session's end
only after the change stream delivered it (up to 0.5 s) and the next check came (up to
1 s more). The databroker's change stream calls ``end`` with every ended session's id as
soon as its tombstone arrives (``databroker/broker.py``): a sign-out, a back-channel
logout, a directory removal or a revocation in any process sharing the store reaches the
connections it names here within one poll of the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.logger import Logger

log = Logger()

Ender = Callable[[str], None]  # ends one connection, given the reason to show or log
Unwatch = Callable[[], None]

SESSION_ENDED = "your session has ended (signed out or revoked)"


class LiveConnections:
    """Open connections by session id; each one's ``end`` is called at most once."""

    def __init__(self) -> None:
        self._by_session: dict[str, dict[int, Ender]] = {}
        self._next = 0

    def add(self, session_id: str, end: Ender) -> Unwatch:
        """Watch ``session_id`` for this connection; the answer forgets it (call it
        when the connection closes: the registry holds nothing of closed ones)."""
        if not session_id:
            return _nothing
        self._next += 1
        token = self._next
        self._by_session.setdefault(session_id, {})[token] = end

        def forget() -> None:
            watchers = self._by_session.get(session_id)
            if watchers is not None:
                watchers.pop(token, None)
                if not watchers:
                    del self._by_session[session_id]
        return forget

    def end(self, session_id: str, reason: str = SESSION_ENDED) -> int:
        """Close every connection ``session_id`` admitted; how many there were."""
        watchers = self._by_session.pop(session_id, None)
        if not watchers:
            return 0
        for end in list(watchers.values()):
            try:
                end(reason)
            except Exception:  # one connection's failure must not keep the others open
                log.failure("ending a connection of an ended session failed")
        return len(watchers)

    def watched(self, session_id: str) -> int:
        return len(self._by_session.get(session_id, ()))

    def __len__(self) -> int:
        return sum(len(w) for w in self._by_session.values())


class SessionWatch(Protocol):
    """What the data plane asks when a tunnel or upgraded connection opens: watch the
    session its request names (``gateway.authenticate.holder``), or nothing."""

    def watch(self, headers: list[tuple[bytes, bytes]], end: Ender) -> Unwatch: ...


class NoSessionWatch:
    """No sign-in in this process (a test's core): the periodic check alone."""

    def watch(self, headers: list[tuple[bytes, bytes]], end: Ender) -> Unwatch:
        return _nothing


def _nothing() -> None:
    pass
