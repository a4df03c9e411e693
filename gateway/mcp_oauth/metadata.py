"""The documents an MCP client discovers the gateway with, and the challenge that
starts it: protected resource metadata (RFC 9728), authorization server metadata (RFC
8414; the same document at OpenID discovery's address, which the MCP text lets clients
try second), and ``WWW-Authenticate: Bearer`` (RFC 6750 3, RFC 9728 5.1). Pure.

What the gateway offers and why: only the authorization code grant with PKCE ``S256``
and refresh tokens; only public clients (``token_endpoint_auth_methods_supported:
none``: every MCP client here proves itself with PKCE and its exact redirect URI, and a
secret in a desktop app proves nothing); client ID metadata documents always, dynamic
registration only when ``mcp_dynamic_client_registration`` is on; ``iss`` in every
authorization response (RFC 9207). No ID tokens are issued: the OpenID discovery
address serves the OAuth document for clients that try it."""

from __future__ import annotations

import json
from typing import Any

from gateway.mcp_oauth.pkce import METHODS

AUTHORIZE = "/.gateway/mcp/authorize"
CONSENT = "/.gateway/mcp/consent"
TOKEN = "/.gateway/mcp/token"
REVOKE = "/.gateway/mcp/revoke"
REGISTER = "/.gateway/mcp/register"
# the one scope: what the route's policy lets the person do through the client
SCOPE = "mcp"
OFFLINE = "offline_access"


def protected_resource(resource: str, issuer: str, name: str = "") -> dict[str, Any]:
    """RFC 9728 2: the route's resource, its one authorization server (the route's
    host), the scope, and the one way to present a token (the Authorization header:
    the MCP text forbids tokens in the query)."""
    doc: dict[str, Any] = {
        "resource": resource,
        "authorization_servers": [issuer],
        "scopes_supported": [SCOPE],
        "bearer_methods_supported": ["header"],
    }
    if name:
        doc["resource_name"] = name
    return doc


def authorization_server(issuer: str, *, registration: bool) -> dict[str, Any]:
    """RFC 8414 2 (and the fields the MCP text asks for)."""
    doc: dict[str, Any] = {
        "issuer": issuer,
        "authorization_endpoint": issuer + AUTHORIZE,
        "token_endpoint": issuer + TOKEN,
        "revocation_endpoint": issuer + REVOKE,
        "scopes_supported": [SCOPE, OFFLINE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "revocation_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": list(METHODS),
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
    }
    if registration:
        doc["registration_endpoint"] = issuer + REGISTER
    return doc


def as_json(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def _quoted(value: str) -> str:
    """An auth-param's quoted-string (RFC 9110 5.6.4): no quote or backslash inside."""
    return '"' + value.replace("\\", "").replace('"', "") + '"'


def challenge(metadata_url: str, *, error: str = "", description: str = "") -> bytes:
    """``WWW-Authenticate`` of a 401 on an MCP route: where the metadata is, the scope
    to ask for, and for a token that was sent but is not good, ``invalid_token``."""
    params = [f"resource_metadata={_quoted(metadata_url)}", f"scope={_quoted(SCOPE)}"]
    if error:
        params.append(f"error={_quoted(error)}")
    if description:
        params.append(f"error_description={_quoted(description)}")
    return ("Bearer " + ", ".join(params)).encode("latin-1", "replace")
