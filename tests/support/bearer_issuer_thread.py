"""The test bearer issuer (``bearer_issuer.py``'s discovery and JWKS over HTTPS with its
own trustme CA) for tests that drive a gateway daemon synchronously: the same answers,
served by the standard library on a thread of the test process, so no reactor runs in
it. ``keys`` rotate by ``rotate``; ``asked`` lists the paths requested."""

from __future__ import annotations

import json
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trustme

from tests.support.bearer_tokens import discovery_document, jwks


class ThreadedIssuer:
    def __init__(self, keys: list[tuple[Any, str]]) -> None:
        self.keys = list(keys)
        self.asked: list[str] = []
        self.ca = trustme.CA()
        self.ca_pem = self.ca.cert_pem.bytes()
        self.issuer = ""
        self._server: ThreadingHTTPServer | None = None

    def rotate(self, keys: list[tuple[Any, str]]) -> None:
        self.keys = list(keys)

    def document(self, path: str) -> bytes | None:
        if path == "/.well-known/openid-configuration":
            return discovery_document(self.issuer)
        if path == "/.well-known/jwks":
            return json.dumps(jwks(*self.keys)).encode()
        return None

    def start(self) -> str:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the standard library's name
                issuer.asked.append(self.path)
                body = issuer.document(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body or b"{}")))
                self.send_header("connection", "close")
                self.end_headers()
                self.wfile.write(body or b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                return None

        cert = self.ca.issue_cert("127.0.0.1")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.TemporaryDirectory() as directory:
            chain, key = Path(directory) / "chain.pem", Path(directory) / "key.pem"
            chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
            key.write_bytes(cert.private_key_pem.bytes())
            context.load_cert_chain(chain, key)
        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.issuer = f"https://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self.issuer

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


@contextmanager
def threaded_issuer(keys: list[tuple[Any, str]]) -> Iterator[ThreadedIssuer]:
    issuer = ThreadedIssuer(keys)
    issuer.start()
    try:
        yield issuer
    finally:
        issuer.stop()
