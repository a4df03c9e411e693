"""The upstream token vault of MCP routes with ``mcp.upstream_oauth2``
(``vault.UpstreamVault``): each person authorizes the route's upstream once, the
gateway keeps the tokens encrypted in the databroker (``tokens``), refreshes them
(``oauth``) and sends the access token to the MCP server as ``Authorization: Bearer``."""

from gateway.mcp_oauth.upstream.vault import (
    CALLBACK_PATH,
    ConnectRefused,
    UpstreamVault,
    route_key,
)

__all__ = ["CALLBACK_PATH", "ConnectRefused", "UpstreamVault", "route_key"]
