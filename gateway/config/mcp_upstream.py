"""An MCP route's ``mcp.upstream_oauth2``: the OAuth client the gateway is toward a
third-party authorization server on each person's behalf, when the MCP server behind
the route needs that person's token for an outside API (the upstream token vault,
``gateway.mcp_oauth.upstream``; docs/how-to/mcp-clients.md).

The person authorizes the upstream once; the gateway keeps the tokens (encrypted, per
person and route), refreshes them and sends the access token to the MCP server as
``Authorization: Bearer``. The MCP client's own token never goes there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gateway.config.errors import Problems
from gateway.config.values import is_loopback_host

_KNOWN = ("client_id", "client_secret", "authorization_url", "token_url", "scopes")


@dataclass(frozen=True, slots=True)
class UpstreamOAuth2:
    """``client_id``/``client_secret``: the gateway's registration at the upstream's
    authorization server (the secret sent with HTTP Basic authentication);
    ``authorization_url``/``token_url``: its endpoints (https, or http on a loopback
    host); ``scopes``: asked for at authorization."""

    client_id: str
    client_secret: str
    authorization_url: str
    token_url: str
    scopes: tuple[str, ...] = ()


def _endpoint(raw: Mapping[str, Any], key: str, path: str, problems: Problems) -> str:
    value = raw.get(key)
    where = f"{path}.{key}"
    if not isinstance(value, str) or not value:
        problems.error(where, "is required: the upstream authorization server's URL")
        return ""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        problems.error(where, f"{value!r} is not a URL: {exc}")
        return ""
    loopback = parts.scheme == "http" and is_loopback_host(parts.hostname or "")
    if not parts.hostname or (parts.scheme != "https" and not loopback):
        problems.error(where, f"{value!r} must be an https URL (http only on a loopback host)")
        return ""
    if parts.fragment or "@" in parts.netloc:
        problems.error(where, f"{value!r} must not have a fragment or user information")
        return ""
    return value


def parse_upstream_oauth2(value: object, path: str, problems: Problems
                          ) -> UpstreamOAuth2 | None:
    """``mcp.upstream_oauth2`` (absent or null: no vault on this route)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.error(path, f"must be an object {{{', '.join(_KNOWN)}}}, got {value!r}")
        return None
    raw: Mapping[str, Any] = value
    for key in raw:
        if key not in _KNOWN:
            problems.error(f"{path}.{key}", f"unknown field; known: {', '.join(_KNOWN)}")
    texts: dict[str, str] = {}
    for key in ("client_id", "client_secret"):
        text = raw.get(key)
        if not isinstance(text, str) or not text:
            problems.error(f"{path}.{key}", "is required: a non-empty string")
            text = ""
        texts[key] = text
    authorization = _endpoint(raw, "authorization_url", path, problems)
    token = _endpoint(raw, "token_url", path, problems)
    scopes = raw.get("scopes", [])
    if isinstance(scopes, str):
        scopes = scopes.split()
    if not isinstance(scopes, list) or not all(isinstance(s, str) and s and " " not in s
                                               for s in scopes):
        problems.error(f"{path}.scopes", f"must be a list of scope names, got {scopes!r}")
        scopes = []
    if not (texts["client_id"] and texts["client_secret"] and authorization and token):
        return None
    return UpstreamOAuth2(texts["client_id"], texts["client_secret"], authorization, token,
                          tuple(scopes))
