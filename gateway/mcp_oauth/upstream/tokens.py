"""A person's tokens for an MCP route's upstream, and a pending authorization of it, as
databroker records sealed with ``databroker/cipher.py`` (ChaCha20-Poly1305 under a key
from ``shared_secret``, bound to the record's type and id): neither the memory store,
nor Redis, nor its backups hold a usable token. Record ids are hashes, so the store's
keys name no person and no route.

- ``mcp.upstream_token``/H(route, upstream, provider, user id): the access and refresh
  tokens (a user id names a person only within the provider that issued it);
  kept while the refresh token may work (``KEEP_SECONDS``), else until the access token
  expires.
- ``mcp.upstream_connect``/STATE: an authorization started at the upstream (the PKCE
  verifier, whose session started it, where to continue), for ``CONNECT_SECONDS``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from gateway.config.mcp_upstream import UpstreamOAuth2
from gateway.databroker.cipher import RecordCipher, RecordKeyError
from gateway.databroker.records import MCP_UPSTREAM_CONNECT, MCP_UPSTREAM_TOKEN, RecordStore

KEEP_SECONDS = 90 * 86400.0
CONNECT_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class UpstreamTokens:
    access_token: str
    refresh_token: str
    expires_at: float  # 0: the upstream did not say


@dataclass(frozen=True, slots=True)
class PendingConnect:
    route_key: str
    provider: str
    user_id: str
    session_id: str
    verifier: str
    continue_url: str
    redirect_uri: str
    expires_at: float


def token_id(route_key: str, upstream: UpstreamOAuth2, provider: str, user_id: str) -> str:
    """The record id of a person's tokens: another upstream (a changed token_url or
    client) is another record, so tokens are never sent where they were not issued; and
    the person is their provider and user id together, as sessions and MCP grants key
    them (on a route that accepts two providers, the same ``sub`` at each is two people)."""
    text = "\0".join((route_key, upstream.token_url, upstream.client_id, provider, user_id))
    return hashlib.sha256(text.encode()).hexdigest()


def _seal(cipher: RecordCipher, kind: str, rid: str, data: dict[str, object]) -> bytes:
    return cipher.seal(kind, rid, json.dumps(data, separators=(",", ":")).encode())


def _open(cipher: RecordCipher, kind: str, rid: str, blob: bytes) -> dict[str, object] | None:
    try:
        data = json.loads(cipher.open(kind, rid, blob))
    except (RecordKeyError, ValueError):
        return None
    return data if isinstance(data, dict) else None


async def read_tokens(records: RecordStore, cipher: RecordCipher, rid: str, now: float
                      ) -> UpstreamTokens | None:
    record = await records.get(MCP_UPSTREAM_TOKEN, rid)
    if record is None or record.deleted or (record.expires_at and record.expires_at <= now):
        return None
    data = _open(cipher, MCP_UPSTREAM_TOKEN, rid, record.data)
    if data is None:
        return None
    try:
        return UpstreamTokens(str(data["access_token"]), str(data["refresh_token"]),
                              float(data["expires_at"]))  # type: ignore[arg-type]
    except (KeyError, TypeError, ValueError):
        return None


async def write_tokens(records: RecordStore, cipher: RecordCipher, rid: str,
                       tokens: UpstreamTokens, now: float) -> None:
    keep = now + KEEP_SECONDS if tokens.refresh_token else tokens.expires_at or now + 3600
    await records.put(MCP_UPSTREAM_TOKEN, rid, _seal(cipher, MCP_UPSTREAM_TOKEN, rid,
                                                     asdict(tokens)), expires_at=keep)


async def forget_tokens(records: RecordStore, rid: str) -> None:
    await records.delete(MCP_UPSTREAM_TOKEN, rid)


async def start_connect(records: RecordStore, cipher: RecordCipher, state: str,
                        pending: PendingConnect) -> None:
    await records.put(MCP_UPSTREAM_CONNECT, state, _seal(cipher, MCP_UPSTREAM_CONNECT, state,
                                                         asdict(pending)),
                      expires_at=pending.expires_at)


async def take_connect(records: RecordStore, cipher: RecordCipher, state: str, now: float
                       ) -> PendingConnect | None:
    """The pending authorization ``state`` names, used up (a state works once)."""
    if not state or len(state) > 100:
        return None
    record = await records.get(MCP_UPSTREAM_CONNECT, state)
    if record is None or record.deleted:
        return None
    await records.delete(MCP_UPSTREAM_CONNECT, state)
    data = _open(cipher, MCP_UPSTREAM_CONNECT, state, record.data)
    try:
        pending = PendingConnect(**data)  # type: ignore[arg-type]
    except TypeError:
        return None
    return pending if now < pending.expires_at else None
