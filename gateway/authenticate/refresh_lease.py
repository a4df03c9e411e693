"""One token refresh per session among every process sharing the session store.

Identity providers that rotate refresh tokens refuse a refresh token used twice and
often revoke the whole grant. With several processes (``workers``, or gateways sharing a
kvstore databroker) two requests of one session can come due at once in two processes;
a lease in the record store lets one of them refresh. The lease is named from a hash of
the session id and the refresh token in use, so each refresh token is spent at most once
while its lease lasts, the next token has a lease of its own (nothing to release), and a
holder that dies lets the lease lapse so a later request refreshes.

A process without the lease waits for the session record to change (refreshed, or
deleted when the refresh failed), polling the store, bounded by ``WAIT_SECONDS`` (the
provider timeout plus a margin); when that passes it goes on with the session it had
(its tokens are still inside the refresh grace).
"""

from __future__ import annotations

import hashlib
from typing import Any

from twisted.internet.task import deferLater

from gateway.authenticate.oidc import TIMEOUT
from gateway.sessions.model import Session
from gateway.sessions.store import SessionStore

#: outlasts the holder's provider call and its store write
LEASE_SECONDS = 3 * TIMEOUT
#: how long a request waits for another process's refresh
WAIT_SECONDS = TIMEOUT + 5.0
POLL_SECONDS = 0.1


def lease_key(session: Session) -> str:
    digest = hashlib.sha256(
        f"{session.id}\0{session.refresh_token}".encode()).hexdigest()[:32]
    return f"refresh:{digest}"


def is_refreshed(before: Session, now: Session) -> bool:
    return (now.refresh_token != before.refresh_token
            or now.token_expires_at > before.token_expires_at)


async def claim(store: SessionStore, session: Session) -> bool:
    """True when this process is to refresh ``session``."""
    return bool(await store.claim_once(lease_key(session), LEASE_SECONDS))


async def wait_for_refresh(store: SessionStore, session: Session, reactor: Any,
                           timeout: float = WAIT_SECONDS) -> Session | None:
    """The session as another process's refresh left it: refreshed, None when the
    refresh ended it, or ``session`` unchanged when ``timeout`` passes first."""
    deadline = reactor.seconds() + timeout
    while True:
        current = await store.fetch(session.id)
        if current is None or is_refreshed(session, current):
            return current
        if reactor.seconds() >= deadline:
            return session
        await deferLater(reactor, POLL_SECONDS, lambda: None)
