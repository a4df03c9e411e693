"""Third-party reverse proxies as test peers, each running a given configuration:
Debian's nginx with a site file (what ``conf.d`` would include) and Debian's caddy with
a Caddyfile. Everything they write (pid, logs, temp files, caddy's data) stays under
the test's directory; they are stopped by PID."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from .nginx import NGINX_HINT, nginx_binary
from .peers import MissingBinary
from .processes import ManagedProcess, port_open

CADDY_HINT = "apt-get install -y caddy"


def render(text: str, replacements: list[tuple[str, str]]) -> str:
    """``text`` with each ``old`` replaced by ``new``; every ``old`` must occur, so a
    test notices when a shipped example changes under it."""
    for old, new in replacements:
        if old not in text:
            raise AssertionError(f"{old!r} is not in the example any more")
        text = text.replace(old, new)
    return text


@contextlib.contextmanager
def nginx_site(tmpdir: Path, site: str, port: int, timeout: float = 15.0
               ) -> Iterator[ManagedProcess]:
    """nginx with ``site`` included in an http block of its own; ready once ``port``
    (a port the site listens on, loopback) accepts connections."""
    binary = nginx_binary()
    if binary is None:
        raise MissingBinary("nginx", NGINX_HINT)
    root = tmpdir / "nginx-site"
    root.mkdir(parents=True, exist_ok=True)
    (root / "site.conf").write_text(site)
    temp = " ".join(f"{kind}_temp_path {root}/{kind};" for kind in
                    ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read our files
    (root / "nginx.conf").write_text(f"""
{user}
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log info;
events {{ worker_connections 256; }}
http {{
  access_log {root}/access.log;
  {temp}
  include {root}/site.conf;
}}
""")
    process = ManagedProcess([binary, "-c", str(root / "nginx.conf"), "-p", str(root),
                              "-e", str(root / "error.log")], log_dir=tmpdir, name="nginx")
    with process:
        process.wait_ready(lambda: port_open("127.0.0.1", port), timeout)
        yield process


@contextlib.contextmanager
def caddy_site(tmpdir: Path, caddyfile: str, port: int, timeout: float = 20.0
               ) -> Iterator[ManagedProcess]:
    """``caddy run`` with ``caddyfile``; ready once ``port`` accepts connections."""
    binary = shutil.which("caddy")
    if binary is None:
        raise MissingBinary("caddy", CADDY_HINT)
    root = tmpdir / "caddy"
    root.mkdir(parents=True, exist_ok=True)
    (root / "Caddyfile").write_text(caddyfile)
    env = {"HOME": str(root), "XDG_DATA_HOME": str(root / "data"),
           "XDG_CONFIG_HOME": str(root / "config")}
    process = ManagedProcess([binary, "run", "--config", str(root / "Caddyfile"),
                              "--adapter", "caddyfile"], log_dir=tmpdir, name="caddy",
                             env=env)
    with process:
        process.wait_ready(lambda: port_open("127.0.0.1", port), timeout)
        yield process
