"""MCP clients as the authorization server knows them: the seam between the
authorization endpoints (``gateway.mcp_oauth``) and the client directory that finds a
client by its metadata document or its registration (``gateway.mcp_oauth.clients``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from twisted.internet.defer import Deferred

ClientKind = Literal["metadata_document", "registered"]


@dataclass(frozen=True, slots=True)
class McpClient:
    """A client the gateway may issue codes to.

    ``client_id``: the https URL of its client ID metadata document, or the id the
    gateway gave it at registration. ``name``: what the consent page shows (the
    document's ``client_name``, else the client id's host). ``redirect_uris``: exactly
    the URIs the document or registration lists."""

    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    kind: ClientKind
    client_uri: str = ""
    logo_uri: str = ""
    token_endpoint_auth_method: str = "none"


class ClientRefused(Exception):
    """The client cannot be used: ``error`` is the OAuth error code answered
    (``invalid_client``, ``invalid_redirect_uri``, ``invalid_client_metadata``, ...),
    ``description`` the reason a person or an operator reads."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description


class Clients(Protocol):
    """The client directory."""

    def resolve(self, client_id: str) -> Deferred[McpClient]:
        """The client ``client_id`` names; fails with ``ClientRefused``."""
        ...

    def check_redirect_uri(self, client: McpClient, redirect_uri: str) -> str | None:
        """``None`` when ``redirect_uri`` may receive the client's codes, else why not."""
        ...

    def register(self, metadata: Mapping[str, Any], peer: str) -> Deferred[McpClient]:
        """Dynamic client registration (RFC 7591) from the address ``peer``; fails with
        ``ClientRefused`` (also when registration is turned off)."""
        ...
