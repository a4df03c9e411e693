"""A small browser for sign-in tests: follows redirects by hand, keeps cookies per host,
fills in node-oidc-provider's dev login and consent forms. Every request goes to
127.0.0.1 with the URL's host in the Host header, so test names like ``app.test`` need
no DNS."""

from __future__ import annotations

import http.client
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


@dataclass
class Browser:
    cookies: dict[str, dict[str, str]] = field(default_factory=dict)
    accept: str = "text/html,application/xhtml+xml"

    def request(self, method: str, url: str, body: bytes = b"",
                headers: dict[str, str] | None = None) -> Reply:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = (parts.hostname or "").lower()
        jar = self.cookies.get(host, {})
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
        for name, value in reply.headers:
            if name.lower() == "set-cookie":
                self._store(host, value)
        return reply

    def _store(self, host: str, header: str) -> None:
        pair, *attrs = [p.strip() for p in header.split(";")]
        name, _, value = pair.partition("=")
        expired = any(a.lower() in ("max-age=0",) for a in attrs)
        jar = self.cookies.setdefault(host, {})
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
            if form is None or not isinstance(fields, dict) or "prompt" not in fields:
                return reply
            data = dict(fields)
            if data.get("prompt") == "login":
                data.update(login=login, password="anything")
            reply = self.follow(urljoin(reply.url, str(form["action"])), "POST",
                                urlencode(data).encode(), stop=stop)
        raise AssertionError("too many provider pages")
