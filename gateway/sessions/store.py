"""What the identity code needs from the databroker: sessions, and directory groups.

The databroker implements both (``gateway.databroker.session_records`` over memory or
kvstore records, ``gateway.databroker.directory_records``)."""

from __future__ import annotations

from typing import Protocol

from twisted.internet.defer import Deferred

from gateway.sessions.model import Session


class SessionStore(Protocol):
    #: copies may be missing here (kvstore): a miss is read with ``fetch``
    needs_fetch: bool

    def get(self, session_id: str) -> Session | None: ...
    def put(self, session: Session) -> None: ...
    def put_confirmed(self, session: Session) -> Deferred[None]: ...
    def delete(self, session_id: str) -> None: ...
    def delete_confirmed(self, session_id: str) -> Deferred[None]: ...
    def fetch(self, session_id: str) -> Deferred[Session | None]: ...
    def claim_once(self, key: str, seconds: float) -> Deferred[bool]:
        """True for the first claim of ``key`` among every process sharing the store
        (for ``seconds``), False for every later one."""
        ...


class DirectoryGroups(Protocol):
    #: changes whenever the directory data changes
    version: int
    #: the identity provider whose people the directory lists
    #: (``gateway.config.providers.directory_provider``): its groups are given to that
    #: provider's sessions only
    provider: str

    def groups_for(self, user_id: str, email: str) -> tuple[str, ...]: ...
