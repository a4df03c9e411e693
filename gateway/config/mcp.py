"""A route's ``mcp`` object: the route serves Model Context Protocol clients.

On such a route the gateway is the OAuth 2.1 authorization server MCP clients sign in
through (``gateway.mcp_oauth``) and reads every JSON-RPC message for policy
(``gateway.mcp``); see docs/how-to/mcp-servers.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.errors import Problems
from gateway.config.mcp_upstream import UpstreamOAuth2, parse_upstream_oauth2

_KNOWN = ("max_request_bytes", "max_response_bytes", "upstream_oauth2")
_DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
_DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class McpRoute:
    """The ``mcp`` object of a route (``mcp: {}`` takes every default).

    ``max_request_bytes``: the largest request body the gateway reads for policy; the
    whole body is read, never a prefix, and a larger one is refused with 413.
    ``max_response_bytes``: the largest list response the gateway reads to filter it (a
    JSON body, or one event of a stream); a larger one is not passed on (the client gets
    a JSON-RPC error instead). ``upstream_oauth2``: the upstream token vault's client
    (``config.mcp_upstream``)."""

    max_request_bytes: int = _DEFAULT_MAX_REQUEST_BYTES
    max_response_bytes: int = _DEFAULT_MAX_RESPONSE_BYTES
    upstream_oauth2: UpstreamOAuth2 | None = None


def parse_mcp(value: object, path: str, problems: Problems) -> McpRoute | None:
    """The route's ``mcp`` value (``null`` or absent: not an MCP route)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.error(path, f"must be an object ({{}} for every default), got {value!r}")
        return None
    raw: Mapping[str, Any] = value
    for key in raw:
        if key not in _KNOWN:
            problems.error(f"{path}.{key}", f"unknown field; known: {', '.join(_KNOWN)}")
    return McpRoute(
        max_request_bytes=_size(raw, "max_request_bytes", _DEFAULT_MAX_REQUEST_BYTES, path,
                                problems),
        max_response_bytes=_size(raw, "max_response_bytes", _DEFAULT_MAX_RESPONSE_BYTES,
                                 path, problems),
        upstream_oauth2=parse_upstream_oauth2(raw.get("upstream_oauth2"),
                                              f"{path}.upstream_oauth2", problems))


def _size(raw: Mapping[str, Any], key: str, default: int, path: str,
          problems: Problems) -> int:
    size = raw.get(key, default)
    if isinstance(size, bool) or not isinstance(size, int) or not 1024 <= size <= 1 << 30:
        problems.error(f"{path}.{key}",
                       f"must be an integer from 1024 to {1 << 30} (bytes), got {size!r}")
        return default
    return size
