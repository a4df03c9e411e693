"""A fetched client ID metadata document, checked into an ``McpClient``.

What MCP (2025-11-25, 2026-07-28) and the CIMD draft require of the server: the
document is JSON (an object), its ``client_id`` equals the URL it was fetched from by
simple string comparison, and it holds the required ``client_name`` and
``redirect_uris``; secret-based client authentication is not allowed in it. Everything
wrong refuses the client (``invalid_client``: the authorization request is aborted, as
the draft says a failed fetch should), naming the URL and the field.
"""

from __future__ import annotations

from gateway.mcp_oauth.client_types import ClientRefused, McpClient
from gateway.mcp_oauth.clients import metadata as m


def client_of_document(url: str, body: bytes) -> McpClient:
    """The client ``body`` (fetched from ``url``) describes; ``ClientRefused`` if none."""
    try:
        document = m.strict_json(body)
    except ValueError as exc:
        raise ClientRefused("invalid_client",
                            f"the client metadata document at {url} {exc}") from None
    if not isinstance(document, dict):
        raise ClientRefused("invalid_client",
                            f"the client metadata document at {url} is not a JSON object")
    claimed = document.get("client_id")
    if claimed != url:
        shown = repr(claimed)[:120] if claimed is not None else "missing"
        raise ClientRefused("invalid_client", f"the client metadata document at {url} names "
                            f"the client_id {shown}; it must be the document's URL exactly")
    try:
        name = m.display_text(document, "client_name", required=True)
        uris = m.redirect_uris(document)
        m.public_auth_method(document)
        m.grant_and_response_types(document)
        client_uri = m.https_uri(document, "client_uri")
        logo_uri = m.https_uri(document, "logo_uri")
    except m.MetadataProblem as exc:
        raise ClientRefused("invalid_client",
                            f"the client metadata document at {url}: {exc}") from None
    return McpClient(client_id=url, name=name, redirect_uris=uris, kind="metadata_document",
                     client_uri=client_uri, logo_uri=logo_uri,
                     token_endpoint_auth_method="none")
