"""The client directory of the MCP authorization server (``client_types.Clients``):
clients known by their client ID metadata documents (``document``, fetched by
``fetch``: SSRF-safe, bounded, cached per ``freshness``) or, when turned on, by dynamic
registration (``registration``, rate-limited by ``rate``); where their codes may go
(``redirect_uris``). ``directory.ClientDirectory`` puts them together; see
docs/how-to/mcp-clients.md."""

from gateway.mcp_oauth.clients.directory import (
    RATE_LIMITED,
    REGISTRATION_OFF,
    ClientDirectory,
    Settings,
    directory_for,
)
from gateway.mcp_oauth.clients.registration import registration_response

__all__ = ["RATE_LIMITED", "REGISTRATION_OFF", "ClientDirectory", "Settings", "directory_for",
           "registration_response"]
