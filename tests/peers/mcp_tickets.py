"""An MCP server over Streamable HTTP for the gateway's MCP tests: a small "tickets" service
made with the official Python SDK's server (``mcp.server.mcpserver.MCPServer``, FastMCP
before mcp 2), as an operator's MCP server would be.

    python tests/peers/mcp_tickets.py --port N [--record FILE]

Serves ``/mcp`` on 127.0.0.1 (``--port 0``: the kernel picks one) and prints
``READY <port>`` once listening. Tools ``search_tickets``, ``get_ticket``,
``delete_ticket``; the resource ``tickets://open`` and the template
``tickets://ticket/{ticket_id}``; the prompt ``triage``. ``--record`` appends one JSON line
per HTTP request (method, path, headers with ``authorization`` and ``cookie`` values
replaced by their SHA-256, the JSON-RPC methods and tool names of the body), so a test sees
what reached the server and what never did.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import sys
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

TICKETS = {
    "T-1": {"id": "T-1", "title": "Printer on fire", "status": "open"},
    "T-2": {"id": "T-2", "title": "VPN drops every hour", "status": "open"},
    "T-3": {"id": "T-3", "title": "Old laptop returned", "status": "closed"},
}

server = MCPServer(name="tickets", instructions="The support team's tickets.")


@server.tool()
def search_tickets(query: str) -> list[dict[str, str]]:
    """Tickets whose title holds the query (case-insensitive)."""
    return [t for t in TICKETS.values() if query.lower() in t["title"].lower()]


@server.tool()
def get_ticket(ticket_id: str) -> dict[str, str]:
    """One ticket by its id."""
    if ticket_id not in TICKETS:
        raise ValueError(f"no ticket {ticket_id}")
    return TICKETS[ticket_id]


@server.tool()
def delete_ticket(ticket_id: str) -> str:
    """Deletes a ticket (the fixture only says it would)."""
    return f"deleted {ticket_id}"


@server.resource("tickets://open", name="open_tickets", mime_type="application/json")
def open_tickets() -> str:
    return json.dumps([t for t in TICKETS.values() if t["status"] == "open"])


@server.resource("tickets://ticket/{ticket_id}", name="ticket", mime_type="application/json")
def ticket_resource(ticket_id: str) -> str:
    return json.dumps(TICKETS.get(ticket_id, {}))


@server.prompt()
def triage(ticket_id: str) -> str:
    """Asks the model to triage one ticket."""
    return f"Triage ticket {ticket_id}: say how urgent it is and who should take it."


def _calls(body: bytes) -> list[dict[str, Any]]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return []
    out = []
    for message in parsed if isinstance(parsed, list) else [parsed]:
        if isinstance(message, dict):
            params = message.get("params") if isinstance(message.get("params"), dict) else {}
            out.append({"method": message.get("method"), "name": params.get("name")})
    return out


class Recorder:
    """ASGI middleware: one JSON line per request into ``path``; the body is passed on
    unchanged (read here only to name what it asks)."""

    def __init__(self, app: Any, path: str) -> None:
        self.app, self.path = app, path

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        headers = {}
        for raw_name, raw_value in scope["headers"]:
            name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
            if name in ("authorization", "cookie"):
                value = "sha256:" + hashlib.sha256(raw_value).hexdigest()
            headers[name] = value
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"method": scope["method"], "path": scope["path"],
                                 "headers": headers, "body_length": len(body),
                                 "calls": _calls(body)}) + "\n")
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--record")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    port = sock.getsockname()[1]
    app: Any = server.streamable_http_app(
        # behind the gateway the Host is the route's (e.g. localhost:PORT); the gateway
        # itself checks Origin: the SDK's DNS-rebinding check stays on for loopback names
        transport_security=TransportSecuritySettings(
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*"]),
        # the 10 MiB bodies of the gateway's tests reach the server
        max_request_body_size=64 * 1024 * 1024)
    if args.record:
        app = Recorder(app, args.record)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(uv.serve, [sock])
            while not uv.started:
                await anyio.sleep(0.02)
            print(f"READY {port}", flush=True)

    anyio.run(serve)
    return 0


if __name__ == "__main__":
    sys.exit(main())
