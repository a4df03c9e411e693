"""nginx's configs: the upstream that answers every request with the same 2 KiB body, and
the reverse proxy in front of it (plain, h2c, TLS)."""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from pathlib import Path

from .procs import Proc, Processes

BODY = "ok\n" + "x" * 2045
BODY_LEN = 2048


def nginx_user_line() -> str:
    """As root, nginx would switch its workers to ``nobody``: keep the current user."""
    if os.geteuid() != 0:
        return ""
    return f"user {pwd.getpwuid(os.getuid()).pw_name} {grp.getgrgid(os.getgid()).gr_name};\n"


def nginx_common(tmp: Path, name: str) -> str:
    return (
        f"{nginx_user_line()}"
        "worker_processes 1;\n"
        "worker_rlimit_nofile 30000;\n"
        f"pid {tmp}/{name}.pid;\n"
        f"error_log {tmp}/{name}.err warn;\n"
        "events { worker_connections 14000; }\n"
    )


def nginx_http_common(tmp: Path, name: str) -> str:
    return (
        "  access_log off;\n"
        "  keepalive_requests 1000000;\n"
        "  keepalive_timeout 120;\n"
        f"  client_body_temp_path {tmp}/{name}-body; proxy_temp_path {tmp}/{name}-proxy;\n"
        f"  fastcgi_temp_path {tmp}/{name}-fcgi; uwsgi_temp_path {tmp}/{name}-uwsgi;\n"
        f"  scgi_temp_path {tmp}/{name}-scgi;\n"
    )


def upstream_conf(tmp: Path, port: int) -> str:
    body = BODY.replace("\n", "\\n")
    return (
        nginx_common(tmp, "upstream")
        + "http {\n" + nginx_http_common(tmp, "upstream")
        + "  server {\n"
        f"    listen 127.0.0.1:{port} backlog=4096;\n"
        f'    location / {{ default_type text/plain; return 200 "{body}"; }}\n'
        "  }\n}\n"
    )


def proxy_conf(tmp: Path, port: int, upstream: int, h2_port: int | None) -> str:
    location = (
        "    location / {\n"
        "      proxy_pass http://up;\n"
        "      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n'
        "    }\n"
    )
    h2 = ""
    if h2_port is not None:  # h2c with prior knowledge on a port of its own
        h2 = f"  server {{\n    listen 127.0.0.1:{h2_port} http2 backlog=4096;\n{location}  }}\n"
    return (
        nginx_common(tmp, "proxy")
        + "http {\n" + nginx_http_common(tmp, "proxy")
        + f"  upstream up {{ server 127.0.0.1:{upstream}; keepalive 64; "
        "keepalive_requests 1000000; }\n"
        f"  server {{\n    listen 127.0.0.1:{port} backlog=4096;\n{location}  }}\n"
        + h2 + "}\n"
    )


def nginx_tls_server(port: int, cert: Path, key: Path, location: str) -> str:
    """An nginx ``server`` block: TLS 1.3 and 1.2, HTTP/2 by ALPN (nginx 1.22 syntax)."""
    return (
        "  server {\n"
        f"    listen 127.0.0.1:{port} ssl http2 backlog=4096;\n"
        f"    ssl_certificate {cert};\n"
        f"    ssl_certificate_key {key};\n"
        "    ssl_protocols TLSv1.2 TLSv1.3;\n"
        "    ssl_session_cache off;\n"
        "    ssl_session_tickets off;\n"
        f"{location}"
        "  }\n"
    )


def nginx_tls_conf(tmp: Path, port: int, upstream: int, cert: Path, key: Path) -> str:
    """nginx terminating TLS in front of the upstream (1 worker, keepalive 64)."""
    location = (
        "    location / {\n"
        "      proxy_pass http://up;\n"
        "      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n'
        "    }\n"
    )
    return (
        nginx_common(tmp, "proxy-tls")
        + "http {\n" + nginx_http_common(tmp, "proxy-tls")
        + f"  upstream up {{ server 127.0.0.1:{upstream}; keepalive 64; "
        "keepalive_requests 1000000; }\n"
        + nginx_tls_server(port, cert, key, location) + "}\n"
    )


def nginx_has_http2() -> bool:
    out = subprocess.run(["nginx", "-V"], capture_output=True, text=True, check=False)
    return "http_v2_module" in out.stderr + out.stdout


def start_nginx(procs: Processes, tmp: Path, name: str, conf: str, cpus: str | None) -> Proc:
    path = tmp / f"{name}.conf"
    path.write_text(conf)
    return procs.start(name, ["nginx", "-p", str(tmp), "-c", str(path),
                              "-e", str(tmp / f"{name}.err"), "-g", "daemon off;"], cpus)
