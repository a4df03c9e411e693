"""Client identifiers: which are metadata document URLs, which a registration's, and
whether a URL may be fetched at all.

A metadata document URL (draft-ietf-oauth-client-id-metadata-document, "Client
Identifier"; MCP 2025-11-25 and 2026-07-28) MUST use https, MUST have a path, MUST NOT
have dot segments, a fragment or user information; it MAY have a port. The gateway also
wants a path beyond ``/`` (MCP's example ``https://example.com/client.json``), refuses
percent-encoded dot segments (a server may decode them) and characters that are not
printable ASCII, and fetches only from hosts of ``mcp_allowed_client_id_domains``,
matched exactly: ``claude.ai`` allows ``https://claude.ai/...`` and not
``https://x.claude.ai/...`` (whoever controls a name under an allowed host is not
thereby trusted).

A registered client's id is ``gwmcp_client_`` and 32 random characters: never an
``https://`` URL, as the draft asks of servers supporting both.
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

REGISTERED_PREFIX = "gwmcp_client_"
MAX_LENGTH = 2000
# RFC 3986's characters (matched lower-cased) without "#" and "@": no fragment, no userinfo
_ALLOWED = re.compile(r"^[a-z0-9\-._~:/?\[\]!$&'()*+,;=%]+$")
_DOT_SEGMENTS = frozenset({".", "..", "%2e", "%2e%2e", ".%2e", "%2e."})


def is_metadata_url(client_id: str) -> bool:
    """Whether ``client_id`` names a metadata document (any URL form, good or bad)."""
    return "://" in client_id[:16] or client_id.lower().startswith("https:")


def is_registered_id(client_id: str) -> bool:
    return (client_id.startswith(REGISTERED_PREFIX)
            and len(client_id) == len(REGISTERED_PREFIX) + 32
            and re.fullmatch(r"[A-Za-z0-9_-]+", client_id[len(REGISTERED_PREFIX):]) is not None)


def url_problem(client_id: str) -> tuple[SplitResult | None, str | None]:
    """The URL's parts, or why ``client_id`` is not a metadata document URL."""
    if len(client_id) > MAX_LENGTH:
        return None, f"is longer than {MAX_LENGTH} characters"
    if not client_id.startswith("https://"):
        return None, "must be an https URL (https:// in lower case)"
    if not _ALLOWED.match(client_id.lower()):
        return None, ("holds a character a client id URL may not have (a fragment, user "
                      "information, a space, a backslash or a non-ASCII character)")
    try:
        parts = urlsplit(client_id)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        return None, f"cannot be parsed: {exc}"
    if not parts.hostname:
        return None, "has no host"
    if not parts.path or parts.path == "/":
        return None, "must have a path (e.g. https://app.example.com/client.json)"
    if any(segment.lower() in _DOT_SEGMENTS for segment in parts.path.split("/")):
        return None, "must not have . or .. path segments"
    return parts, None


def host_refusal(parts: SplitResult, allowed_hosts: frozenset[str]) -> str | None:
    """Why the URL's host is not allowed (exact match), or None."""
    host = parts.hostname or ""
    if host in allowed_hosts:
        return None
    if not allowed_hosts:
        return ("no client ID metadata document host is allowed "
                "(mcp_allowed_client_id_domains is empty)")
    return f"the host {host} is not in mcp_allowed_client_id_domains"
