"""The MCP rows of the benchmarks (issue 43): the same JSON-RPC ``tools/call`` POSTed to
an MCP route (``mcp: {}``: the bearer token looked up, the body read whole and parsed,
the call decided by ``mcp_tool``, then forwarded) and to a plain signed-in route (the
session cookie; the body streamed through unread), both to the same upstream.

The MCP route's token comes from the gateway's own authorization server, as an MCP
client gets it (``tests/support/mcp_oauth_flow.py``: dynamic registration, PKCE, the
sign-in and the consent page with the stdlib browser, the code exchanged), right before
the rows run: an access token lives five minutes, and the two rows alternate on their
own (``Bench.interleaved``) well within that."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

MCP_HOST = "mcp.test"
PLAIN_HOST = "mcp-plain.test"
TOOL = "get_ticket"
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
    "name": TOOL, "arguments": {"ticket_id": "T-1"}}}, separators=(",", ":"))


def routes(port: int, upstream: str, user: str) -> list[dict[str, Any]]:
    """The two routes (flow mappings for the YAML's ``policy``)."""
    return [
        {"from": f"http://{MCP_HOST}:{port}", "to": upstream, "mcp": {},
         "pass_identity_headers": True,
         "policy": [{"allow": {"and": [{"email": {"is": user}},
                                       {"mcp_tool": {"in": [TOOL, "search_tickets"]}}]}}]},
        {"from": f"http://{PLAIN_HOST}:{port}", "to": upstream, "allowed_users": [user],
         "pass_identity_headers": True},
    ]


SETTINGS = ["mcp_dynamic_client_registration: true"]


def wrk_script(tmp: Path) -> Path:
    """wrk's Lua: every request the same POST (headers by -H, as the other rows)."""
    path = tmp / "mcp-post.lua"
    path.write_text(f'wrk.method = "POST"\nwrk.body = {json.dumps(BODY)}\n'
                    'wrk.headers["Content-Type"] = "application/json"\n'
                    'wrk.headers["Accept"] = "application/json, text/event-stream"\n')
    return path


def token(gw_port: int, user: str) -> dict[str, Any]:
    """An access token for the MCP route, obtained as a client does; and how long it took."""
    from .paths import import_peers

    import_peers()  # tests/ on the path
    from tests.support.mcp_oauth_flow import Flow

    t0 = time.monotonic()
    flow = Flow(gw_port, f"{MCP_HOST}:{gw_port}")
    got = flow.tokens(user)
    return {"access_token": got["access_token"], "client_id": got["client_id"],
            "seconds": round(time.monotonic() - t0, 2)}


def check_post(port: int, headers: dict[str, str], upstream_len: int) -> dict[str, Any]:
    """One POST of the body: must be 200 with the upstream's answer (not a JSON-RPC error
    of the gateway's, not a 401)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", "/", body=BODY, headers={
            **headers, "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    if resp.status != 200 or len(body) != upstream_len:
        raise RuntimeError(f"POST to {headers.get('Host')}: expected 200 with the upstream's "
                           f"{upstream_len} bytes, got {resp.status}: {body[:300]!r}")
    return {"status": resp.status, "body_len": len(body)}
