"""A minimal OCSP responder for tests: answers "good" for every serial, signed by the
issuer it is given (pebble's intermediate), on a loopback HTTP port in a thread."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509 import ocsp


class Signer:
    """Who signs the answers; set once the CA is running (its URL is needed first)."""

    issuer: x509.Certificate | None = None
    key: Any = None


@contextmanager
def ocsp_responder(signer: Signer) -> Iterator[tuple[str, list[int]]]:
    """(URL, list of serials asked about) while the responder runs."""
    asked: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            assert signer.issuer is not None
            request = ocsp.load_der_ocsp_request(body)
            asked.append(request.serial_number)
            now = datetime.datetime.now(datetime.UTC)
            response = (
                ocsp.OCSPResponseBuilder()
                .add_response_by_hash(
                    request.issuer_name_hash, request.issuer_key_hash, request.serial_number,
                    request.hash_algorithm, ocsp.OCSPCertStatus.GOOD,
                    now - datetime.timedelta(minutes=1), now + datetime.timedelta(hours=1),
                    None, None)
                .responder_id(ocsp.OCSPResponderEncoding.HASH, signer.issuer)
                .sign(signer.key, hashes.SHA256())
            )
            der = response.public_bytes(serialization.Encoding.DER)
            self.send_response(200)
            self.send_header("Content-Type", "application/ocsp-response")
            self.send_header("Content-Length", str(len(der)))
            self.end_headers()
            self.wfile.write(der)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", asked
    finally:
        server.shutdown()
        server.server_close()
