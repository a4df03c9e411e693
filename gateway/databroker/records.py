"""The databroker's record store: one interface, a memory and a kvstore backend.

A record is a typed, versioned blob: sessions, users, directory users and directory
groups are records (``TYPES``), and new kinds need no schema change. Every change (put or
delete) takes the store's next version, so a reader that remembers the last version it
saw can ask for everything that changed since (``sync``): that change stream is how each
gateway process learns that a session was revoked or the directory changed elsewhere.
Deletions stay visible as tombstones for ``TOMBSTONE_SECONDS``; a reader further behind
than that (or whose store was emptied) is told to start over (``Changes.reset``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from twisted.internet.defer import Deferred

SESSION = "session"
USER = "user"
DIRECTORY_USER = "directory.user"
DIRECTORY_GROUP = "directory.group"
SSH_KEY = "ssh.key"  # an SSH public key's fingerprint bound to a session
SSH_SIGN_IN = "ssh.sign_in"  # an SSH connection waiting for its person to sign in
SSH_HOST_KEY = "ssh.host_key"  # a server's host key pinned on first use
SESSION_INDEX = "session.index"  # the sessions one IdP session, user or e-mail names
MCP_CLIENT = "mcp.client"  # an MCP client registered dynamically (RFC 7591)
MCP_UPSTREAM_TOKEN = "mcp.upstream_token"  # a person's tokens for an MCP route's upstream
MCP_UPSTREAM_CONNECT = "mcp.upstream_connect"  # a person authorizing that upstream
# the authorization server of MCP clients (``gateway.mcp_oauth``): codes, grants and
# tokens by the SHA-256 of what the client holds, a person's consents to clients
MCP_CODE = "mcp.code"
MCP_GRANT = "mcp.grant"
MCP_TOKEN = "mcp.token"
MCP_CONSENT = "mcp.consent"
TYPES = (SESSION, USER, DIRECTORY_USER, DIRECTORY_GROUP, SSH_KEY, SSH_SIGN_IN, SSH_HOST_KEY,
         SESSION_INDEX, MCP_CLIENT, MCP_CODE, MCP_GRANT, MCP_TOKEN, MCP_CONSENT,
         MCP_UPSTREAM_TOKEN, MCP_UPSTREAM_CONNECT)

TOMBSTONE_SECONDS = 15 * 60.0
SYNC_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Record:
    """``data`` is the record's plain bytes (JSON); backends encrypt it at rest.
    ``expires_at`` (0 = never) lets the store drop records nobody will read again."""

    type: str
    id: str
    data: bytes
    version: int
    modified_at: float
    deleted_at: float = 0.0
    expires_at: float = 0.0

    @property
    def deleted(self) -> bool:
        return self.deleted_at > 0


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed after a version: at most ``SYNC_BATCH`` records in version order
    (``more`` when there is another batch), and the version to ask from next.
    ``reset``: the reader's version is unknown here (too old, or the store was emptied);
    it must drop what it holds and read afresh from ``version``."""

    records: tuple[Record, ...]
    version: int
    reset: bool = False
    more: bool = False
    epoch: str = ""


class RecordStore(Protocol):
    """Every method answers with a Deferred; failures are ``StorageUnavailable``
    (nothing answered in time) or ``RecordKeyError`` (written with another secret)."""

    backend: str

    def get(self, type: str, id: str) -> Deferred[Record | None]: ...

    def put(self, type: str, id: str, data: bytes, expires_at: float = 0.0,
            revive: bool = True) -> Deferred[Record | None]:
        """The stored record; None when ``revive`` is false and the record was deleted
        (a deleted session never comes back)."""
        ...

    def delete(self, type: str, id: str) -> Deferred[None]: ...

    def query(self, type: str) -> Deferred[list[Record]]:
        """The live (not deleted) records of ``type``."""
        ...

    def sync(self, since: int) -> Deferred[Changes]: ...

    def sweep(self, now: float) -> Deferred[int]:
        """Drop expired records and old tombstones; the number of records dropped."""
        ...

    def lease(self, name: str, holder: str, seconds: float) -> Deferred[bool]:
        """Hold ``name`` for ``seconds`` unless someone else does (one directory sync
        among several gateway processes)."""
        ...

    def release(self, name: str, holder: str) -> Deferred[None]:
        """Give ``name`` up if ``holder`` holds it."""
        ...

    def close(self) -> Deferred[None]: ...


class StorageUnavailable(Exception):
    """The kvstore could not answer in time; a request that needs it gets a 503."""
