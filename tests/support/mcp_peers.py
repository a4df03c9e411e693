"""The MCP tests' peers: the "tickets" MCP server (``tests/peers/mcp_tickets.py``, the
Python SDK's server over Streamable HTTP), an HTTPS server for client ID metadata
documents (its own trustme CA, on a thread of the test process), and the two official SDK
clients (``mcp_client_py.py``, ``tests/peers/mcp/client.mjs``) driven one command at a
time over their stdin/stdout.

    with tickets_server(tmp) as tickets: ...          # tickets.url: http://127.0.0.1:N/mcp
    with metadata_server(tmp) as docs:                # docs.url_for("/python.json")
    with mcp_client("python", tmp, url=..., browser=browser_argv("alice@example.test"),
                    client_metadata_url=docs.url_for("/python.json")) as client:
        docs.serve("/python.json", client_document(..., [client.redirect_uri]))
        client.ok("connect"); client.ask("call", name="get_ticket", arguments={...})
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import selectors
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trustme

from tests.support.processes import ManagedProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
TICKETS_SCRIPT = REPO_ROOT / "tests" / "peers" / "mcp_tickets.py"
TS_DIR = REPO_ROOT / "tests" / "peers" / "mcp"
BROWSER_DIR = REPO_ROOT / "tests" / "peers" / "browser"


# ------------------------------------------------------------------ the MCP server


@dataclass(frozen=True)
class Tickets:
    url: str  # the MCP endpoint, http://127.0.0.1:PORT/mcp
    origin: str  # http://127.0.0.1:PORT (a route's ``to``)
    record: Path
    process: ManagedProcess

    def requests(self) -> list[dict[str, Any]]:
        """What reached the server, one entry per HTTP request (mcp_tickets.py --record)."""
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line]

    def called(self) -> list[str]:
        """The tool names of every ``tools/call`` that reached the server."""
        return [c["name"] for r in self.requests() for c in r["calls"]
                if c["method"] == "tools/call"]


@contextlib.contextmanager
def tickets_server(tmpdir: Path, timeout: float = 20.0) -> Iterator[Tickets]:
    record = Path(tmpdir) / "tickets-requests.jsonl"
    argv = [sys.executable, "-u", str(TICKETS_SCRIPT), "--port", "0", "--record", str(record)]
    with ManagedProcess(argv, log_dir=Path(tmpdir), name="mcp-tickets") as proc:
        port = int(proc.wait_for_log_line("READY ", timeout).split()[1])
        origin = f"http://127.0.0.1:{port}"
        yield Tickets(f"{origin}/mcp", origin, record, proc)


# ------------------------------------------------- client ID metadata documents


@dataclass
class Served:
    """One path's answer: a body (or a ``redirect`` location), after ``delay`` seconds."""

    body: bytes = b""
    status: int = 200
    content_type: str = "application/json"
    redirect: str = ""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


class MetadataServer:
    """HTTPS on 127.0.0.1 with a certificate for ``localhost`` from its own test CA
    (``ca_path``): a client's metadata document where the client says it is
    (``https://localhost:PORT/...``). ``asked`` lists the paths fetched. ``host``: the
    name in its URLs and certificate, ``bind``: the address it listens on (another
    loopback address, ``127.0.0.2``, to tell two servers apart by network); ``ca``: share
    one test CA between servers."""

    def __init__(self, directory: Path, host: str = "localhost", bind: str = "127.0.0.1",
                 ca: trustme.CA | None = None) -> None:
        self.host, self.bind = host, bind
        self.ca = ca or trustme.CA()
        self.ca_path = directory / f"metadata-ca-{id(self.ca)}.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_path))
        self.paths: dict[str, Served] = {}
        self.asked: list[str] = []
        self.origin = ""
        self._server: ThreadingHTTPServer | None = None

    def url_for(self, path: str) -> str:
        return self.origin + path

    def serve(self, path: str, answer: Served | dict[str, Any]) -> str:
        self.paths[path] = answer if isinstance(answer, Served) else Served(
            json.dumps(answer).encode())
        return self.url_for(path)

    def start(self) -> None:
        docs = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the standard library's name
                docs.asked.append(self.path)
                served = docs.paths.get(self.path)
                if served is None:
                    self.send_error(404)
                    return
                if served.delay:
                    time.sleep(served.delay)
                if served.redirect:
                    self.send_response(302)
                    self.send_header("location", served.redirect)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                self.send_response(served.status)
                self.send_header("content-type", served.content_type)
                self.send_header("content-length", str(len(served.body)))
                for name, value in served.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                with contextlib.suppress(OSError):  # a client that stopped reading
                    self.wfile.write(served.body)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        cert = self.ca.issue_cert(self.host, self.bind)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as directory:
            chain, key = Path(directory) / "chain.pem", Path(directory) / "key.pem"
            chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
            key.write_bytes(cert.private_key_pem.bytes())
            context.load_cert_chain(chain, key)
        server = ThreadingHTTPServer((self.bind, 0), Handler)
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.origin = f"https://{self.host}:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def client_context(self) -> ssl.SSLContext:
        """A TLS client context trusting the test CA (for the test's own checks)."""
        return ssl.create_default_context(cafile=str(self.ca_path))


@contextlib.contextmanager
def metadata_server(directory: Path, host: str = "localhost", bind: str = "127.0.0.1",
                    ca: trustme.CA | None = None) -> Iterator[MetadataServer]:
    docs = MetadataServer(directory, host, bind, ca)
    docs.start()
    try:
        yield docs
    finally:
        docs.stop()


def client_document(client_id: str, redirect_uris: list[str], name: str = "Ticket Agent",
                    **extra: Any) -> dict[str, Any]:
    """A client ID metadata document as an MCP client publishes it (draft-ietf-oauth-client-
    id-metadata-document: ``client_id`` is the document's own URL)."""
    return {"client_id": client_id, "client_name": name, "client_uri":
            client_id.rsplit("/", 1)[0] + "/", "redirect_uris": redirect_uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"], "token_endpoint_auth_method": "none", **extra}


# ------------------------------------------------------------- the SDK clients


def browser_argv(login: str, *, chromium: bool = False, deny: bool = False,
                 record: Path | None = None, cookies: Path | None = None) -> list[str]:
    """The browser command a client driver runs with the authorization URL appended."""
    argv = [sys.executable, "-m", "tests.support.mcp_browser", "--login", login]
    if cookies is not None:
        argv += ["--cookies", str(cookies)]
    if chromium:
        argv.append("--chromium")
    if deny:
        argv.append("--deny")
    if record is not None:
        argv += ["--record", str(record)]
    return argv


class DriverError(AssertionError):
    pass


_RUNS = itertools.count(1)


class McpClient:
    """One SDK client process; ``ask`` sends a command and returns its JSON answer."""

    def __init__(self, sdk: str, argv: list[str], log_path: Path) -> None:
        self.sdk = sdk
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            cwd=REPO_ROOT, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        # the driver's first line: the port its loopback callback listens on
        self.callback_port = int(self._answer("start", 30)["callback_port"])
        self.redirect_uri = f"http://127.0.0.1:{self.callback_port}/callback"

    def ask(self, op: str, timeout: float = 60.0, **fields: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps({"op": op, "timeout": timeout, **fields})
                                  + "\n").encode())
        self.process.stdin.flush()
        return self._answer(op, timeout + 5)

    def _answer(self, op: str, timeout: float) -> dict[str, Any]:
        assert self.process.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.process.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise DriverError(f"{self.sdk} client: no answer to {op} in {timeout}s; "
                                  f"log: {self.log_tail()}")
        line = self.process.stdout.readline()
        if not line:
            raise DriverError(f"{self.sdk} client exited ({self.process.poll()}) during "
                              f"{op}; log: {self.log_tail()}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ok(self, op: str, timeout: float = 60.0, **fields: Any) -> dict[str, Any]:
        """``ask``, failing the test (with the client's log) unless the answer is ok."""
        answer = self.ask(op, timeout, **fields)
        if not answer["ok"]:
            raise DriverError(f"{self.sdk} client: {op} failed: {answer['error']}; "
                              f"log: {self.log_tail()}")
        return answer

    def http_log(self) -> list[dict[str, Any]]:
        return [e for e in self.ok("log")["log"] if e["kind"] == "http"]

    def browser_runs(self) -> list[dict[str, Any]]:
        return [e for e in self.ok("log")["log"] if e["kind"] == "browser"]

    def log_tail(self, size: int = 3000) -> str:
        self._log.flush()
        return self.log_path.read_bytes()[-size:].decode("utf-8", "replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(Exception):
                self.ask("close", timeout=5)
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5)
        self._log.close()


def client_argv(sdk: str, url: str, callback_port: int, browser: list[str] | None,
                client_metadata_url: str = "", client_name: str = "") -> list[str]:
    if sdk == "python":
        argv = [sys.executable, "-m", "tests.support.mcp_client_py"]
    elif sdk == "typescript":
        argv = ["node", str(TS_DIR / "client.mjs")]
    else:
        raise ValueError(f"unknown SDK {sdk!r}")
    argv += ["--url", url, "--callback-port", str(callback_port)]
    if client_metadata_url:
        argv += ["--client-metadata-url", client_metadata_url]
    if browser:
        argv += ["--browser", json.dumps(browser)]
    if client_name:
        argv += ["--client-name", client_name]
    return argv


@contextlib.contextmanager
def mcp_client(sdk: str, tmpdir: Path, *, url: str, browser: list[str] | None = None,
               client_metadata_url: str = "", client_name: str = "",
               callback_port: int = 0) -> Iterator[McpClient]:
    """Run one SDK client (``python`` or ``typescript``); stopped at the end. Its loopback
    callback listens on ``callback_port`` (0: a port the kernel picks, no race), named
    by ``McpClient.callback_port`` and ``redirect_uri`` once it runs."""
    if sdk == "typescript" and not (TS_DIR / "node_modules" / "@modelcontextprotocol").is_dir():
        raise DriverError("run `npm ci --prefix tests/peers/mcp` first (scripts/setup-dev.sh)")
    log_path = Path(tmpdir) / f"mcp-client-{sdk}-{next(_RUNS)}.log"
    client = McpClient(sdk, client_argv(sdk, url, callback_port, browser,
                                        client_metadata_url, client_name), log_path)
    try:
        yield client
    finally:
        client.stop()
