"""Where sessions live. In memory here; the databroker issue adds kvstore (Redis)."""

from __future__ import annotations

from typing import Protocol

from gateway.sessions.model import Session


class SessionStore(Protocol):
    def get(self, session_id: str) -> Session | None: ...
    def put(self, session: Session) -> None: ...
    def delete(self, session_id: str) -> None: ...


class MemorySessionStore:
    """Sessions of this process (all-in-one mode with ``databroker_storage_type:
    memory``). Readers check expiry themselves; ``sweep`` drops expired ones."""

    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def put(self, session: Session) -> None:
        self._sessions[session.id] = session

    def delete(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)

    def sweep(self, now: float) -> int:
        expired = [k for k, s in self._sessions.items() if not s.valid(now)]
        for key in expired:
            del self._sessions[key]
        return len(expired)

    def __len__(self) -> int:
        return len(self._sessions)
