"""Answers the identity layer gives: redirects, small HTML pages for browsers, JSON or
plain text for everything else. Nothing internal is ever shown."""

from __future__ import annotations

import html
import json

from gateway.dataplane.authz import Deny
from gateway.dataplane.responses import html_document, wants_html, wants_json

__all__ = ["error", "page", "redirect", "wants_html", "wants_json"]

Pairs = tuple[tuple[bytes, bytes], ...]
_TITLES = {400: "Bad request", 401: "Sign-in required", 403: "Access denied",
           495: "Client certificate required", 500: "Something went wrong",
           502: "Sign-in failed", 503: "Sign-in unavailable"}


def redirect(location: str, extra: Pairs = (), status: int = 302) -> Deny:
    return Deny(status, b"", ((b"location", location.encode("latin-1")),
                              (b"cache-control", b"no-store"), *extra), reason="redirect")


def error(status: int, message: str, headers: list[tuple[bytes, bytes]], reason: str,
          extra: Pairs = ()) -> Deny:
    title = _TITLES.get(status, "Error")
    if wants_html(headers):
        body = html_document(title, f"<p>{html.escape(message)}</p>")
        ctype = b"text/html; charset=utf-8"
    elif wants_json(headers):
        body = json.dumps({"status": status, "error": message}).encode() + b"\n"
        ctype = b"application/json"
    else:
        body = f"{status} {title}: {message}\n".encode()
        ctype = b"text/plain; charset=utf-8"
    return Deny(status, body, ((b"content-type", ctype), (b"cache-control", b"no-store"),
                               *extra), reason=reason)


def page(title: str, body_html: str, extra: Pairs = (), status: int = 200) -> Deny:
    return Deny(status, html_document(title, body_html),
                ((b"content-type", b"text/html; charset=utf-8"),
                 (b"cache-control", b"no-store"), *extra), reason="page")
