"""The official MCP Python SDK's client (``mcp`` on PyPI) with its OAuth support, driven by a
test one step at a time: one JSON command a line on stdin, one JSON answer a line on stdout
(the same protocol as ``tests/peers/mcp/client.mjs``, the TypeScript SDK's driver;
``tests/support/mcp_peers.py`` runs both).

    python -m tests.support.mcp_client_py --url URL [--callback-port N]
        [--client-metadata-url URL] [--browser ARGV_JSON] [--client-name NAME]

The authorization step is the SDK's own: on a 401 it discovers the protected resource and
authorization server metadata, uses ``--client-metadata-url`` as its client id when the
server supports client ID metadata documents (else registers dynamically), runs PKCE and
calls the redirect handler, which here runs ``--browser`` (a command; the authorization URL
is appended) as a person's browser would open it. The browser ends at this process's
loopback callback (``http://127.0.0.1:N/callback``; ``N`` is the first line the driver
prints, ``{"ok": true, "callback_port": N}``), which hands the code to the SDK.

Commands (``op``): ``connect``, ``list_tools``, ``call`` (``name``, ``arguments``),
``list_prompts``, ``get_prompt`` (``name``, ``arguments``), ``list_resources``,
``read_resource`` (``uri``), ``expire`` (the SDK takes its access token as expired, so its
next request refreshes first, as after the token's lifetime), ``tokens`` (the current
tokens), ``browser`` (``argv``: the browser command from now on), ``log`` (every HTTP
exchange and browser run so far), ``close``. Answers:
``{"ok": true, ...}`` or ``{"ok": false, "error": {"type", "code", "message"}}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPError


class MemoryStorage:
    """The SDK's TokenStorage, in memory (a real client keeps it on disk)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Callback:
    """The loopback redirect URI a native client listens on (RFC 8252)."""

    def __init__(self, port: int) -> None:
        self.params: dict[str, str] | None = None
        callback = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the standard library's name
                parts = urlsplit(self.path)
                if parts.path != "/callback":
                    self.send_error(404)
                    return
                callback.params = {k: v[0] for k, v in parse_qs(parts.query).items()}
                body = b"<p>Signed in. You may close this window.</p>"
                self.send_response(200)
                self.send_header("content-type", "text/html")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.log: list[dict[str, Any]] = []
        self.storage = MemoryStorage()
        self.callback = Callback(args.callback_port)
        self.callback_port = self.callback.server.server_address[1]
        self.redirect_uri = f"http://127.0.0.1:{self.callback_port}/callback"
        self.provider = OAuthClientProvider(
            server_url=args.url,
            client_metadata=OAuthClientMetadata(
                redirect_uris=[self.redirect_uri],  # type: ignore[list-item]
                client_name=args.client_name,
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none"),
            storage=self.storage,
            redirect_handler=self.redirect,
            callback_handler=self.callback_result,
            client_metadata_url=args.client_metadata_url or None)
        self.client: Client | None = None
        self.task_group: Any = None  # main_async's: the connections' owner tasks run in it
        self.closed: anyio.Event | None = None

    async def hook(self, response: httpx2.Response) -> None:
        request = response.request
        self.log.append({"kind": "http", "method": request.method, "url": str(request.url),
                         "status": response.status_code,
                         "www_authenticate": response.headers.get("www-authenticate"),
                         "mcp_method": request.headers.get("mcp-method")})

    async def redirect(self, url: str) -> None:
        self.callback.params = None
        argv = [*json.loads(self.args.browser), url] if self.args.browser else None
        if argv is None:
            self.log.append({"kind": "browser", "url": url, "status": None})
            raise RuntimeError("no --browser given: the authorization step cannot run")
        result = await anyio.run_process(argv, check=False)
        self.log.append({"kind": "browser", "url": url, "status": result.returncode,
                         "output": result.stdout.decode("utf-8", "replace")[-2000:],
                         "stderr": result.stderr.decode("utf-8", "replace")[-2000:]})
        if result.returncode != 0:
            raise RuntimeError(f"the browser step failed ({result.returncode})")

    async def callback_result(self) -> AuthorizationCodeResult:
        params = self.callback.params
        if params is None:
            raise RuntimeError("the browser never reached the callback")
        if "code" not in params:
            raise RuntimeError(f"authorization refused: {params}")
        return AuthorizationCodeResult(code=params["code"], state=params.get("state"),
                                       iss=params.get("iss"))

    async def own(self, ready: anyio.Event, failed: list[BaseException],
                  closed: anyio.Event) -> None:
        """Holds one connection (its HTTP client, transport and session) in a task of its
        own: a failure inside the SDK's tasks (an authorization that cannot be done) ends
        this connection, and the next command is answered with an error, not the driver
        ended."""
        try:
            async with httpx2.AsyncClient(auth=self.provider, timeout=httpx2.Timeout(20.0),
                                          event_hooks={"response": [self.hook]}) as http, \
                    Client(streamable_http_client(self.args.url, http_client=http),
                           read_timeout_seconds=20.0) as client:
                self.client = client
                ready.set()
                await closed.wait()
        except Exception as exc:
            failed.append(exc)
            self.log.append({"kind": "connection_ended", "error": _error(exc)})
        finally:
            self.client = None
            ready.set()

    async def disconnect(self) -> None:
        if self.closed is not None:
            self.closed.set()
            self.closed = None
            await anyio.sleep(0.05)  # the owner leaves its contexts

    async def run(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "connect":
            await self.disconnect()
            ready = anyio.Event()
            failed: list[BaseException] = []
            self.closed = anyio.Event()
            self.task_group.start_soon(self.own, ready, failed, self.closed)
            await ready.wait()
            if failed:
                raise failed[0]
            assert self.client is not None
            return {"protocol_version": self.client.session.protocol_version}
        if op == "log":
            return {"log": self.log}
        if op == "tokens":
            tokens = self.storage.tokens
            info = self.storage.client_info
            return {"access_token": tokens.access_token if tokens else None,
                    "refresh_token": tokens.refresh_token if tokens else None,
                    "client_id": info.client_id if info else None}
        if op == "browser":
            self.args.browser = json.dumps(command["argv"])
            return {}
        if op == "expire":
            self.provider.context.token_expiry_time = time.time() - 1
            return {}
        if op == "close":
            await self.disconnect()
            return {}
        client = self.client
        if client is None:
            raise RuntimeError("not connected (connect first; or the connection ended: "
                               "see the log's connection_ended)")
        if op == "list_tools":
            return {"tools": [t.name for t in (await client.list_tools()).tools]}
        if op == "call":
            result = await client.call_tool(command["name"], command.get("arguments") or {})
            return {"is_error": bool(result.is_error),
                    "text": [c.text for c in result.content if hasattr(c, "text")]}
        if op == "list_prompts":
            return {"prompts": [p.name for p in (await client.list_prompts()).prompts]}
        if op == "get_prompt":
            prompt = await client.get_prompt(command["name"], command.get("arguments") or {})
            return {"messages": len(prompt.messages)}
        if op == "list_resources":
            return {"resources": [str(r.uri) for r in (await client.list_resources()).resources]}
        if op == "read_resource":
            read = await client.read_resource(command["uri"])
            return {"contents": [getattr(c, "text", None) for c in read.contents]}
        raise ValueError(f"unknown op {op!r}")


def _error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, MCPError):
        return {"type": "MCPError", "code": exc.code, "message": exc.message}
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return {"type": type(exc).__name__, "code": None, "message": str(exc)[:2000]}


async def serve(driver: Driver, commands: Any, answers: Any) -> None:
    """Runs every command in this one task: the client's transport and session are
    entered and left here (anyio's scopes must be left by the task that entered them)."""
    async for command in commands:
        try:
            answer: dict[str, Any] = {"ok": True, **await driver.run(command)}
        except Exception as exc:
            answer = {"ok": False, "error": _error(exc)}
        await answers.send(answer)
        if command["op"] == "close":
            return


async def main_async(args: argparse.Namespace) -> None:
    driver = Driver(args)
    # the first line: where the callback listens (``--callback-port 0``: the kernel's pick)
    print(json.dumps({"ok": True, "callback_port": driver.callback_port}), flush=True)
    stdin = anyio.wrap_file(sys.stdin)
    send_command, commands = anyio.create_memory_object_stream[dict[str, Any]](1)
    send_answer, answers = anyio.create_memory_object_stream[dict[str, Any]](1)
    try:
        async with anyio.create_task_group() as tg:
            driver.task_group = tg
            tg.start_soon(serve, driver, commands, send_answer)
            async for line in stdin:
                if not line.strip():
                    continue
                command = json.loads(line)
                await send_command.send(command)
                try:
                    with anyio.fail_after(float(command.get("timeout", 60))):
                        answer = await answers.receive()
                except TimeoutError:
                    print(json.dumps({"ok": False, "error": {
                        "type": "Timeout", "code": None, "message": f"{command['op']} timed out"}}),
                        flush=True)
                    tg.cancel_scope.cancel()
                    return
                print(json.dumps(answer), flush=True)
                if command["op"] == "close":
                    return
            tg.cancel_scope.cancel()
    finally:
        driver.callback.server.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--callback-port", type=int, default=0)
    parser.add_argument("--client-metadata-url", default="")
    parser.add_argument("--browser", default="")
    parser.add_argument("--client-name", default="Python SDK test client")
    args = parser.parse_args()
    anyio.run(main_async, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
