"""Where the authorization server gets its client directory (the ``Clients`` of
``client_types``): ``client_directory``, called per configuration snapshot with the
previous one (a directory keeps its caches and rate limits across reloads).

Until the directory of client ID metadata documents and registrations is installed
here, ``NoClients`` refuses every client: the endpoints answer, no code is issued."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from twisted.internet.defer import Deferred, fail

from gateway.config.snapshot import Snapshot
from gateway.databroker.records import RecordStore
from gateway.mcp_oauth.client_types import ClientRefused, Clients, McpClient


class NoClients:
    """No client directory: every client is refused."""

    def resolve(self, client_id: str) -> Deferred[McpClient]:
        return fail(ClientRefused("invalid_client", "this gateway has no MCP client "
                                  "directory"))

    def check_redirect_uri(self, client: McpClient, redirect_uri: str) -> str | None:
        return "no client is known"

    def register(self, metadata: Mapping[str, Any], peer: str) -> Deferred[McpClient]:
        return fail(ClientRefused("invalid_client_metadata", "registration is off"))


def client_directory(reactor: Any, snapshot: Snapshot, records: RecordStore,
                     previous: Clients | None) -> Clients:
    """The client directory for ``snapshot``."""
    return NoClients()
