"""A fake MCP client directory for the daemon under test: put this directory first on
the daemon's PYTHONPATH and name a JSON file in ``GATEWAY_TEST_MCP_CLIENTS``
(``{client_id: {"name": ..., "redirect_uris": [...]}}``); Python imports this module at
start and ``gateway.mcp_oauth.directory.client_directory`` answers those clients only.
For the authorization server's own tests (tests/integration/test_mcp_oauth.py), which
are about the flow and not about how clients are found."""

from __future__ import annotations

import json
import os

_FILE = os.environ.get("GATEWAY_TEST_MCP_CLIENTS", "")

if _FILE:
    from collections.abc import Mapping
    from typing import Any

    from twisted.internet.defer import Deferred, fail, succeed

    import gateway.mcp_oauth.directory as _directory
    from gateway.mcp_oauth.client_types import ClientRefused, McpClient

    class _FileClients:
        def __init__(self) -> None:
            with open(_FILE) as f:
                listed = json.load(f)
            self.known = {cid: McpClient(cid, c["name"], tuple(c["redirect_uris"]),
                                         "metadata_document") for cid, c in listed.items()}

        def resolve(self, client_id: str) -> Deferred[McpClient]:
            client = self.known.get(client_id)
            if client is None:
                return fail(ClientRefused("invalid_client", "not a client of this test"))
            return succeed(client)

        def check_redirect_uri(self, client: McpClient, redirect_uri: str) -> str | None:
            return None if redirect_uri in client.redirect_uris else "not one it lists"

        def register(self, metadata: Mapping[str, Any], peer: str) -> Deferred[McpClient]:
            return fail(ClientRefused("invalid_client_metadata", "not in this test"))

    def _fake(reactor: Any, snapshot: Any, records: Any, previous: Any) -> _FileClients:
        return _FileClients()

    _directory.client_directory = _fake  # type: ignore[assignment]
