"""An MCP client's OAuth steps by hand (stdlib only), for the tests and the benchmark that
need each step under their control: register (RFC 7591), authorize with PKCE through the
stdlib browser (sign-in and the gateway's consent page), exchange the code, refresh,
revoke, and a JSON-RPC request with the token. Every request goes to 127.0.0.1 with the
route's host in the Host header (``Browser`` does the same), so test names like
``mcp.test`` need no DNS. The official SDK clients are ``mcp_peers.mcp_client``; this is
for what they would never send (PKCE plain, a replayed code, another route's token)."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from tests.support.browser import Browser, Reply
from tests.support.mcp_browser import answer_consent

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "by-hand", "version": "1"}}}


def tool_call(name: str, arguments: dict[str, Any] | None = None, id: int = 1
              ) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": name, "arguments": arguments or {}}}


def pkce() -> tuple[str, str]:
    """A PKCE verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def jsonrpc(self) -> Any:
        """The JSON-RPC answer, from a JSON body or the first SSE ``data:`` event."""
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            for line in self.body.decode().splitlines():
                if line.startswith("data:"):
                    return json.loads(line[5:])
            raise AssertionError(f"no SSE data event in {self.body[:300]!r}")
        return self.json()


def send(port: int, method: str, host: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None, timeout: float = 15.0) -> Answer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body or None, headers={"Host": host, **(headers or {})})
        response = conn.getresponse()
        data = response.read()
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        conn.close()


@dataclass
class Flow:
    """One MCP route's authorization server, as a client sees it: ``host`` is the route's
    host with the gateway's port (``mcp.test:8080``), ``port`` the gateway's."""

    port: int
    host: str
    path: str = "/mcp"
    redirect_uri: str = "http://127.0.0.1:1/callback"  # never listened on: ``stop`` there
    browser: Browser = field(default_factory=Browser)

    @property
    def origin(self) -> str:
        return f"http://{self.host}"

    @property
    def resource(self) -> str:
        return self.origin

    def post_form(self, path: str, fields: dict[str, str]) -> Answer:
        return send(self.port, "POST", self.host, path, urlencode(fields).encode(),
                    {"Content-Type": "application/x-www-form-urlencoded"})

    def register(self, **metadata: Any) -> str:
        """Dynamic client registration; the new client id."""
        document = {"client_name": "by-hand client", "redirect_uris": [self.redirect_uri],
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"], "token_endpoint_auth_method": "none",
                    **metadata}
        answer = send(self.port, "POST", self.host, "/.gateway/mcp/register",
                      json.dumps(document).encode(), {"Content-Type": "application/json"})
        assert answer.status == 201, (answer.status, answer.body[:500])
        client_id: str = answer.json()["client_id"]
        return client_id

    def authorize_url(self, client_id: str, challenge: str | None, *,
                      method: str = "S256", resource: str | None = "",
                      redirect_uri: str = "", state: str = "st") -> str:
        params = {"response_type": "code", "client_id": client_id,
                  "redirect_uri": redirect_uri or self.redirect_uri, "state": state}
        if challenge is not None:
            params.update(code_challenge=challenge, code_challenge_method=method)
        if resource is not None:
            params["resource"] = resource or self.resource
        return f"{self.origin}/.gateway/mcp/authorize?{urlencode(params)}"

    def authorize(self, url: str, login: str, approve: bool = True,
                  redirect_uri: str = "") -> dict[str, str]:
        """Open ``url`` in the browser, sign in (first time), answer the consent page
        (unless remembered); the query the client's redirect URI receives."""
        stop = redirect_uri or self.redirect_uri
        reply = self.browser.sign_in(url, login, stop=stop)
        if not reply.url.startswith(stop):
            reply = answer_consent(self.browser, reply, approve, stop=stop)
        if not reply.url.startswith(stop):
            raise AssertionError(f"the authorization did not come back to the client: "
                                 f"{reply.status} {reply.url} {reply.body[:400]!r}")
        return {k: v[0] for k, v in parse_qs(urlsplit(reply.url).query).items()}

    def page(self, url: str, login: str) -> Reply:
        """Where the browser ends for ``url`` (an error page the gateway shows, or the
        redirect back to the client, not fetched)."""
        return self.browser.sign_in(url, login, stop=self.redirect_uri)

    def exchange(self, client_id: str, code: str, verifier: str | None, *,
                 resource: str | None = "", redirect_uri: str = "") -> Answer:
        fields = {"grant_type": "authorization_code", "code": code, "client_id": client_id,
                  "redirect_uri": redirect_uri or self.redirect_uri}
        if verifier is not None:
            fields["code_verifier"] = verifier
        if resource is not None:
            fields["resource"] = resource or self.resource
        return self.post_form("/.gateway/mcp/token", fields)

    def refresh(self, client_id: str, refresh_token: str, resource: str | None = "") -> Answer:
        fields = {"grant_type": "refresh_token", "refresh_token": refresh_token,
                  "client_id": client_id}
        if resource is not None:
            fields["resource"] = resource or self.resource
        return self.post_form("/.gateway/mcp/token", fields)

    def tokens(self, login: str, client_id: str = "") -> dict[str, Any]:
        """The whole flow: register (unless ``client_id``), authorize, exchange; the token
        response (with ``client_id`` added)."""
        client_id = client_id or self.register()
        verifier, challenge = pkce()
        got = self.authorize(self.authorize_url(client_id, challenge), login)
        assert "code" in got, got
        answer = self.exchange(client_id, got["code"], verifier)
        assert answer.status == 200, (answer.status, answer.body[:500])
        return {**answer.json(), "client_id": client_id}

    def rpc(self, message: Any, token: str = "", *, host: str = "", path: str = "",
            headers: dict[str, str] | None = None, raw: bytes | None = None) -> Answer:
        """A JSON-RPC POST to the MCP endpoint (``host``: another route's)."""
        sent = {"Content-Type": "application/json",
                "Accept": "application/json, text/event-stream", **(headers or {})}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        body = raw if raw is not None else json.dumps(message).encode()
        return send(self.port, "POST", host or self.host, path or self.path, body, sent,
                    timeout=60)
