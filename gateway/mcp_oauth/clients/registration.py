"""Dynamic client registration (RFC 7591) when ``mcp_dynamic_client_registration`` is
true: the metadata checked, the client stored in the databroker (record ``mcp.client``,
id the client id), so every worker and split-mode process knows it.

A registration grants nothing: it only lets a client ask, and the person still signs in
and consents to it by name (the consent page marks it as registered, not vouched for by
a metadata document). Every client is public: a requested ``client_secret_basic`` or
``client_secret_post`` is replaced by ``none`` (RFC 7591 3.2.1 lets the server replace
requested values; the response says what was registered, and no secret is issued), as a
secret anyone can obtain by registering authenticates nothing that PKCE does not. Other
methods (``private_key_jwt``, ``tls_client_auth``, ...) are refused: such a client
expects its key to matter. A registration lasts ``LIFETIME`` from its last use.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any

from gateway.databroker.records import MCP_CLIENT, Record, RecordStore
from gateway.mcp_oauth.client_types import ClientRefused, McpClient
from gateway.mcp_oauth.clients import metadata as m
from gateway.mcp_oauth.clients.client_ids import REGISTERED_PREFIX

LIFETIME = 90 * 86400.0
UNNAMED = "Unnamed MCP client"
REPLACED_METHODS = frozenset({"none", "client_secret_basic", "client_secret_post"})


def new_client_id() -> str:
    return REGISTERED_PREFIX + secrets.token_urlsafe(24)  # 32 characters, 192 bits


def client_of_registration(client_id: str, metadata: Mapping[str, Any]) -> McpClient:
    """The client ``metadata`` (a registration request's JSON object) describes;
    ``ClientRefused`` with RFC 7591's ``invalid_redirect_uri`` or
    ``invalid_client_metadata`` naming the field."""
    if not isinstance(metadata, Mapping):
        raise ClientRefused("invalid_client_metadata", "the registration must be a JSON object")
    try:
        uris = m.redirect_uris(metadata)
        name = m.display_text(metadata, "client_name", required=False)
        method = metadata.get("token_endpoint_auth_method", "none")
        if method not in REPLACED_METHODS:
            raise m.MetadataProblem("token_endpoint_auth_method",
                                    f"is {str(method)[:40]!r}: the gateway registers public "
                                    "clients only (none)")
        m.grant_and_response_types(metadata)
        client_uri = m.https_uri(metadata, "client_uri")
        logo_uri = m.https_uri(metadata, "logo_uri")
    except m.MetadataProblem as exc:
        raise ClientRefused("invalid_redirect_uri" if exc.redirect
                            else "invalid_client_metadata", str(exc)) from None
    return McpClient(client_id=client_id, name=name or UNNAMED, redirect_uris=uris,
                     kind="registered", client_uri=client_uri, logo_uri=logo_uri,
                     token_endpoint_auth_method="none")


def registration_response(client: McpClient, issued_at: float) -> dict[str, Any]:
    """RFC 7591 3.2.1's answer: the client id and the metadata as registered."""
    answer: dict[str, Any] = {
        "client_id": client.client_id,
        "client_id_issued_at": int(issued_at),
        "redirect_uris": list(client.redirect_uris),
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }
    if client.name != UNNAMED:
        answer["client_name"] = client.name
    for field in ("client_uri", "logo_uri"):
        if getattr(client, field):
            answer[field] = getattr(client, field)
    return answer


def _data(client: McpClient, registered_at: float) -> bytes:
    return json.dumps({"name": client.name, "redirect_uris": list(client.redirect_uris),
                       "client_uri": client.client_uri, "logo_uri": client.logo_uri,
                       "registered_at": registered_at},
                      separators=(",", ":"), sort_keys=True).encode()


async def store(records: RecordStore, client: McpClient, now: float) -> None:
    await records.put(MCP_CLIENT, client.client_id, _data(client, now),
                      expires_at=now + LIFETIME)


def client_of_record(record: Record | None, now: float) -> McpClient | None:
    """The registered client a record holds (None: deleted, expired or unreadable)."""
    if record is None or record.deleted or (record.expires_at and record.expires_at <= now):
        return None
    try:
        data = json.loads(record.data)
        return McpClient(client_id=record.id, name=str(data["name"]),
                         redirect_uris=tuple(str(u) for u in data["redirect_uris"]),
                         kind="registered", client_uri=str(data.get("client_uri", "")),
                         logo_uri=str(data.get("logo_uri", "")),
                         token_endpoint_auth_method="none")
    except (ValueError, KeyError, TypeError):
        return None


async def lookup(records: RecordStore, client_id: str, now: float) -> McpClient | None:
    """The registered client ``client_id``; its registration extended when more than
    half of it has passed (a client in use stays registered)."""
    record = await records.get(MCP_CLIENT, client_id)
    client = client_of_record(record, now)
    if client is not None and record is not None and record.expires_at - now < LIFETIME / 2:
        await records.put(MCP_CLIENT, client_id, record.data, expires_at=now + LIFETIME,
                          revive=False)
    return client
