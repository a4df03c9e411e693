"""The programmatic sign-in: from "the gateway wants a sign-in" to a token.

1. A one-shot HTTP server listens on ``127.0.0.1:0``: the browser comes back there.
2. ``GET <gateway>/.gateway/api/v1/login?gateway_redirect_uri=http://127.0.0.1:<port>/``
   answers the sign-in URL (text/plain).
3. The URL is printed and opened in a browser; the person signs in at the identity
   provider, which sends the browser to ``http://127.0.0.1:<port>/?gateway_jwt=<token>``.
4. The server answers "signed in, you can close this tab" and stops listening.

Every step has a deadline; Ctrl-C stops the reactor and with it the wait.
"""

from __future__ import annotations

import html
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode, urlsplit

import treq
from treq.client import HTTPClient
from twisted.internet import defer, error
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.web.client import Agent
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from gateway.cli.tcp.endpoints import AgentEndpoints, GatewayEndpoints
from gateway.cli.tcp.messages import TunnelError

LOGIN_PATH = "/.gateway/api/v1/login"
LOGIN_TIMEOUT = 10.0  # seconds for the gateway to answer the sign-in URL
SIGN_IN_TIMEOUT = 300.0  # seconds a person has to sign in
MAX_TOKEN = 16 * 1024

DONE_PAGE = ("<!doctype html><meta charset=utf-8><title>Signed in</title>"
             "<style>body{font:16px system-ui;margin:3em auto;max-width:40em}</style>"
             "<h1>Signed in</h1><p>gateway tcp has its token for {what}. "
             "You can close this tab.</p>")


def valid_token(value: str) -> bool:
    return 0 < len(value) <= MAX_TOKEN and value.isascii() and value.isprintable() and \
        " " not in value


class TokenReceiver(Resource):
    """Answers the browser's one visit that carries ``gateway_jwt``; anything else is
    404. ``token`` fires (on the next reactor turn, after the page is written)."""

    isLeaf = True

    def __init__(self, clock: Any, what: str, path: bytes = b"/") -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # twisted.web is unannotated
        self.clock = clock
        self.what = what
        self.path = path  # random per sign-in: only the gateway's redirect knows it
        self.token: Deferred[str] = Deferred()

    def render_GET(self, request: Request) -> bytes:
        values = request.args.get(b"gateway_jwt") if request.args else None
        token = values[0].decode("ascii", "replace") if values else ""
        request.setHeader(b"cache-control", b"no-store")
        if request.path != self.path or not valid_token(token):
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"not found\n"
        request.setHeader(b"content-type", b"text/html; charset=utf-8")
        if not self.token.called:
            self.clock.callLater(0, self._deliver, token)
        return DONE_PAGE.replace("{what}", html.escape(self.what)).encode()

    def _deliver(self, token: str) -> None:
        if not self.token.called:
            self.token.callback(token)


async def login_url(reactor: Any, endpoints: GatewayEndpoints, redirect_uri: str) -> str:
    """Ask the gateway for the sign-in URL that ends at ``redirect_uri``."""
    gateway = endpoints.gateway
    client = HTTPClient(Agent.usingEndpointFactory(reactor, AgentEndpoints(endpoints)))
    url = f"{gateway.origin}{LOGIN_PATH}?" + urlencode({"gateway_redirect_uri": redirect_uri})
    headers: dict[bytes | str, bytes | str] = {b"accept": b"text/plain"}
    try:
        response = await client.get(url, headers=headers, timeout=LOGIN_TIMEOUT,
                                    allow_redirects=False, reactor=reactor)
        body: bytes = await treq.content(response).addTimeout(LOGIN_TIMEOUT, reactor)
    except (defer.TimeoutError, error.TimeoutError, CancelledError):
        raise TunnelError(f"the gateway at {gateway.origin} did not answer the sign-in "
                          f"request within {LOGIN_TIMEOUT:.0f} s") from None
    except Exception as exc:
        raise TunnelError(f"cannot get the sign-in URL from {gateway.origin}: "
                          f"{exc}") from None
    text = body.decode("utf-8", "replace").strip()
    if response.code != 200:
        first = text.split("\n", 1)[0][:200]
        raise TunnelError(f"the gateway at {gateway.origin} refused to start a sign-in "
                          f"({response.code}: {first})")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc or not text.isprintable():
        raise TunnelError(f"the gateway at {gateway.origin} answered the sign-in request "
                          "with something that is not a URL")
    return text


async def sign_in(reactor: Any, what: str, get_url: Callable[[str], Awaitable[str]],
                  open_url: Callable[[str], None], say: Callable[[str], None]) -> str:
    """Run the whole sign-in for ``what`` (``db:5432 at https://gw:443``): the token, or
    ``TunnelError``. ``get_url(redirect_uri)`` asks the gateway (``login_url``),
    ``open_url`` starts the browser."""
    # A path nobody else knows: any local process or web page can reach the loopback
    # port while we wait, and must not be able to plant a token of its own.
    path = f"/{secrets.token_urlsafe(18)}/"
    receiver = TokenReceiver(reactor, what, path.encode())
    site = Site(receiver)
    site.noisy = False
    port = await TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(site)
    try:
        redirect_uri = f"http://127.0.0.1:{port.getHost().port}{path}"
        url = await get_url(redirect_uri)
        say(f"sign-in required for {what}. Opening the sign-in page in your browser; "
            f"if it does not open, visit this URL:\n\n    {url}\n")
        open_url(url)
        minutes = SIGN_IN_TIMEOUT / 60
        say(f"waiting for the sign-in (up to {minutes:.0f} minutes, Ctrl-C to give up)...")
        try:
            token: str = await receiver.token.addTimeout(SIGN_IN_TIMEOUT, reactor)
        except (defer.TimeoutError, CancelledError):
            raise TunnelError(f"no sign-in within {minutes:.0f} minutes; run again to "
                              "retry") from None
        say("signed in.")
        return token
    finally:
        port.stopListening()
