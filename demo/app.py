"""Demo upstream: an HTML page showing who the gateway says is signed in (the claims of
X-Gateway-Jwt-Assertion) and every header it forwarded."""

from __future__ import annotations

import argparse
import base64
import html
import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def assertion_claims(token: str) -> dict[str, object]:
    """The JWT's payload, decoded for display only (the upstream should verify it with
    the gateway's JWKS: /.well-known/gateway/jwks.json on the authenticate host)."""
    try:
        payload = token.split(".")[1]
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gateway-demo-app"

    def do_GET(self) -> None:
        claims = assertion_claims(self.headers.get("X-Gateway-Jwt-Assertion", ""))
        who = (f"<p>Signed in as <b>{html.escape(str(claims.get('email', '?')))}</b> "
               f"(groups: {html.escape(', '.join(map(str, claims.get('groups') or [])))})."
               ' <a href="/.gateway/signout/">Sign out</a></p>'
               if claims else "<p>No signed-in user (a public route).</p>")
        rows = "".join(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
            for k, v in self.headers.items()
        )
        body = (
            "<!doctype html><meta charset=utf-8><title>gateway demo app</title>"
            "<style>body{font:15px system-ui;margin:2em}th{text-align:left;padding-right:1em}"
            "td{word-break:break-all}</style><h1>Hello from the demo app</h1>" + who +
            f"<p>The gateway forwarded <code>{html.escape(self.command)} "
            f"{html.escape(self.path)}</code> with these headers:</p><table>{rows}</table>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(min(length, 1 << 20))
        self.do_GET()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"demo app on http://127.0.0.1:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
