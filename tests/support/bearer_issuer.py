"""A bearer-token issuer run by the tests: discovery and JWKS over HTTPS on 127.0.0.1,
with a test CA (trustme), standing in for GitHub Actions' and a cluster's issuer.

Its state is set by the test between requests: ``keys`` (rotated by assigning),
``required`` (a bearer token every request must carry, as a Kubernetes API server
wants the caller's service-account token), ``mode``
(``ok``; ``down``: the connection is dropped without an answer; ``error``: 503;
``garbage``: an HTML page with 200; ``redirect``: a 302 to ``/moved-jwks``, a key set
of a key nobody configured), and it counts
what was asked. Runs on the reactor of the test (trial's).
"""

from __future__ import annotations

import json
from typing import Any

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from OpenSSL import SSL
from twisted.internet import reactor
from twisted.internet.interfaces import IListeningPort, IOpenSSLContextFactory
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import implementer

from tests.support.bearer_tokens import discovery_document, jwks, rsa_key


class _Issuer(Resource):
    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.issuer = ""
        self.keys: list[tuple[Any, str]] = []
        self.mode = "ok"
        self.asked: list[str] = []
        self.required = ""  # a bearer token every request must carry (an API server's)

    def render_GET(self, request: Request) -> bytes | int:
        path = request.path.decode()
        self.asked.append(path)
        request.setHeader(b"connection", b"close")
        if self.required and request.getHeader(b"authorization") != \
                f"Bearer {self.required}".encode():
            request.setResponseCode(401)
            return b'{"kind":"Status","code":401}'
        if self.mode == "down":
            request.channel.transport.abortConnection()
            return NOT_DONE_YET
        if self.mode == "error":
            request.setResponseCode(503)
            return b"unavailable"
        if self.mode == "garbage":
            request.setHeader(b"content-type", b"text/html")
            return b"<html><body>maintenance</body></html>"
        if path == "/moved-jwks":  # where ``redirect`` points: a key nobody configured
            return json.dumps(jwks((rsa_key("moved"), "k-moved"))).encode()
        if self.mode == "redirect":
            request.redirect(f"{self.issuer}/moved-jwks".encode())
            return b""
        request.setHeader(b"content-type", b"application/json")
        if path == "/.well-known/openid-configuration":
            return discovery_document(self.issuer)
        if path == "/.well-known/jwks":
            return json.dumps(jwks(*self.keys)).encode()
        request.setResponseCode(404)
        return b"{}"


@implementer(IOpenSSLContextFactory)
class _Context:
    def __init__(self, context: SSL.Context) -> None:
        self.context = context

    def getContext(self) -> SSL.Context:
        return self.context


class BearerIssuer:
    """``start()``, then ``issuer`` (``https://127.0.0.1:PORT``) and ``ca_pem`` (the only
    CA that trusts it); ``stop()`` returns the Deferred of the port's closing."""

    def __init__(self, keys: list[tuple[Any, str]]) -> None:
        self.resource = _Issuer()
        self.resource.keys = list(keys)
        self.ca = trustme.CA()
        self.ca_pem = self.ca.cert_pem.bytes()
        self.port: IListeningPort | None = None

    def start(self) -> str:
        cert = self.ca.issue_cert("127.0.0.1")
        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        chain = x509.load_pem_x509_certificates(cert.cert_chain_pems[0].bytes())
        context.use_certificate(chain[0])
        context.use_privatekey(serialization.load_pem_private_key(
            cert.private_key_pem.bytes(), None))  # type: ignore[arg-type]
        self.port = reactor.listenSSL(0, Site(self.resource), _Context(context),
                                      interface="127.0.0.1")
        self.resource.issuer = f"https://127.0.0.1:{self.port.getHost().port}"
        return self.resource.issuer

    @property
    def issuer(self) -> str:
        return self.resource.issuer

    def rotate(self, keys: list[tuple[Any, str]]) -> None:
        self.resource.keys = list(keys)

    def require(self, token: str) -> None:
        self.resource.required = token

    def set_mode(self, mode: str) -> None:
        self.resource.mode = mode

    @property
    def asked(self) -> list[str]:
        return self.resource.asked

    def stop(self) -> Any:
        return self.port.stopListening() if self.port is not None else None
