"""Demo upstream: an HTML page listing the request the gateway forwarded to it."""

from __future__ import annotations

import argparse
import html
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gateway-demo-app"

    def do_GET(self) -> None:
        rows = "".join(
            f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
            for k, v in self.headers.items()
        )
        body = (
            "<!doctype html><meta charset=utf-8><title>gateway demo app</title>"
            "<style>body{font:15px system-ui;margin:2em}th{text-align:left;padding-right:1em}"
            "</style><h1>Hello from the demo app</h1>"
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
