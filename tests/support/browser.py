"""A small browser for sign-in tests: follows redirects by hand, keeps cookies per host
(and per ``Domain`` when a cookie names one), fills in node-oidc-provider's dev login and
consent forms, remembers every request it made (``history``). Every request goes to
127.0.0.1 with the URL's host in the Host header (and as the TLS server name for https
URLs, with ``tls``), so test names like ``app.test`` need no DNS."""

from __future__ import annotations

import http.client
import socket
import ssl
from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import urlencode, urljoin, urlsplit


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, object]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "form":
            self.forms.append({"action": a.get("action") or "", "method":
                               (a.get("method") or "get").lower(), "fields": {}})
        elif tag == "input" and self.forms and a.get("name"):
            fields = self.forms[-1]["fields"]
            assert isinstance(fields, dict)
            fields[a["name"]] = a.get("value") or ""


@dataclass
class Reply:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    url: str

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class _LoopbackHTTPS(http.client.HTTPConnection):
    """HTTPS to 127.0.0.1 with ``server_name`` as SNI and certificate name."""

    def __init__(self, port: int, context: ssl.SSLContext, server_name: str) -> None:
        super().__init__("127.0.0.1", port, timeout=15)
        self._context = context
        self._server_name = server_name

    def connect(self) -> None:
        super().connect()
        assert isinstance(self.sock, socket.socket)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)


@dataclass
class Browser:
    cookies: dict[str, dict[str, str]] = field(default_factory=dict)
    accept: str = "text/html,application/xhtml+xml"
    tls: ssl.SSLContext | None = None  # trusts the test CA; needed for https URLs
    domain_cookies: dict[str, dict[str, str]] = field(default_factory=dict)
    history: list[tuple[str, str, int]] = field(default_factory=list)  # method, URL, status

    def request(self, method: str, url: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> Reply:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = (parts.hostname or "").lower()
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            assert self.tls is not None, "an https URL needs Browser(tls=...)"
            conn = _LoopbackHTTPS(port, self.tls, host)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        jar = {k: v for domain, values in self.domain_cookies.items()
               if host == domain or host.endswith("." + domain) for k, v in values.items()}
        jar.update(self.cookies.get(host, {}))
        out = {"Host": parts.netloc, "Accept": self.accept, **(headers or {})}
        if jar:
            out["Cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
        if body:
            out.setdefault("Content-Type", "application/x-www-form-urlencoded")
        try:
            conn.request(method, path, body=body or None, headers=out)
            resp = conn.getresponse()
            data = resp.read()
            reply = Reply(resp.status, resp.getheaders(), data, url)
        finally:
            conn.close()
        self.history.append((method, url, reply.status))
        for name, value in reply.headers:
            if name.lower() == "set-cookie":
                self._store(host, value)
        return reply

    def _store(self, host: str, header: str) -> None:
        pair, *attrs = [p.strip() for p in header.split(";")]
        name, _, value = pair.partition("=")
        expired = any(a.lower() in ("max-age=0",) for a in attrs)
        domain = next((a.split("=", 1)[1].strip().lstrip(".").lower() for a in attrs
                       if a.lower().startswith("domain=")), "")
        if domain and not (host == domain or host.endswith("." + domain)):
            return  # browsers refuse a cookie for a domain the host is not in
        jar = (self.domain_cookies if domain else self.cookies).setdefault(domain or host, {})
        if expired or not value:
            jar.pop(name, None)
        else:
            jar[name] = value

    def follow(self, url: str, method: str = "GET", body: bytes = b"",
               stop: str | None = None, limit: int = 15) -> Reply:
        """Follow redirects until a non-redirect answer (or a URL starting with ``stop``)."""
        for _ in range(limit):
            reply = self.request(method, url, body)
            location = reply.header("location")
            if reply.status not in (301, 302, 303, 307, 308) or not location:
                return reply
            url = urljoin(url, location)
            method, body = "GET", b""
            if stop and url.startswith(stop):
                return Reply(reply.status, reply.headers, b"", url)
        raise AssertionError("too many redirects")

    def sign_in(self, url: str, login: str, stop: str | None = None) -> Reply:
        """Open ``url``; when the provider's dev pages come, log in as ``login`` and
        consent; return the final answer (or the redirect to a URL starting with
        ``stop``, not fetched)."""
        reply = self.follow(url, stop=stop)
        for _ in range(6):
            parser = _Forms()
            parser.feed(reply.body.decode("utf-8", "replace"))
            form = next((f for f in parser.forms if f["method"] == "post"), None)
            fields = form["fields"] if form else None
            if form is None or not isinstance(fields, dict) or not (
                    "prompt" in fields or "logout" in fields):
                # ("logout": the provider ends its session of another account first, a
                # form a real browser submits by script)
                return reply
            data = dict(fields)
            if data.get("prompt") == "login":
                data.update(login=login, password="anything")
            reply = self.follow(urljoin(reply.url, str(form["action"])), "POST",
                                urlencode(data).encode(), stop=stop)
        raise AssertionError("too many provider pages")

    def sign_out(self, origin: str) -> Reply:
        """Sign out through the gateway at ``origin`` (``http://app.test:PORT``) as a
        person does: the confirmation page, then its form with the page's CSRF token."""
        confirm = self.request("GET", f"{origin}/.gateway/signout/")
        token = confirm.body.split(b'name="csrf" value="')[1].split(b'"')[0]
        out = self.request("POST", f"{origin}/.gateway/signout/", b"csrf=" + token)
        assert out.status in (200, 302), out
        return out
