"""nginx as a test upstream: static answers, keep-alive, its connection number in a
header (so tests can see connection reuse)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .processes import ManagedProcess, free_port, port_open

NGINX_HINT = "apt-get install -y nginx"


@dataclass(frozen=True)
class Nginx:
    url: str
    port: int
    process: ManagedProcess


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None)


@contextlib.contextmanager
def nginx_upstream(tmpdir: Path, timeout: float = 15.0) -> Iterator[Nginx]:
    """nginx on a free loopback port. Locations: ``/`` 2 KiB text, ``/empty`` 204,
    ``/big`` a 4 MiB file; every response carries ``X-Connection: $connection``."""
    binary = nginx_binary()
    if binary is None:
        raise FileNotFoundError(f"nginx is not installed ({NGINX_HINT})")
    root = tmpdir / "nginx"
    (root / "html").mkdir(parents=True, exist_ok=True)
    (root / "html" / "big").write_bytes(bytes(range(256)) * (4 << 12))
    port = free_port()
    body = "ok\\n" + "x" * 2045
    temp = " ".join(f"{kind}_temp_path {root}/{kind};" for kind in
                    ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read our temp dir
    (root / "nginx.conf").write_text(f"""
{user}
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log {root}/access.log;
  {temp}
  keepalive_requests 10000;
  server {{
    listen 127.0.0.1:{port};
    add_header X-Connection $connection always;
    location = / {{ default_type text/plain; return 200 "{body}"; }}
    location = /empty {{ return 204; }}
    location = /big {{ root {root}/html; }}
  }}
}}
""")
    process = ManagedProcess([binary, "-c", str(root / "nginx.conf"), "-p", str(root)],
                             log_dir=tmpdir, name="nginx")
    with process:
        process.wait_ready(lambda: port_open("127.0.0.1", port), timeout)
        yield Nginx(f"http://127.0.0.1:{port}", port, process)
