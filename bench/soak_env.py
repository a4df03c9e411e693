"""The soak test's processes: upstreams, Redis, the identity provider and two gateways.

Everything listens on 127.0.0.1 on a port chosen once, so a component that the fault
injector kills can be started again on the same port. Children are started through
``tests.support.processes.ManagedProcess`` (own session, parent-death signal, log file)
and stopped by PID.
"""

from __future__ import annotations

import base64
import contextlib
import json
import mmap
import os
import random
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.support import peers  # noqa: E402
from tests.support.daemon import Daemon, gateway_daemon  # noqa: E402
from tests.support.nginx import nginx_binary  # noqa: E402
from tests.support.processes import ManagedProcess, free_port, http_ok, port_open  # noqa: E402

FAULT_UPSTREAM = BENCH_DIR / "soak_fault_upstream.py"
WS_ECHO = REPO_ROOT / "tests" / "peers" / "ws_echo.py"

#: Route hosts (one certificate covers them all, so one TLS or HTTP/2 connection may
#: carry requests for several of them).
HOSTS = ("nginx.test", "echo.test", "fault.test", "ws.test", "app.test", "auth.test",
         "reload.test")
USER = "alice@example.test"
SMALL_BODY = b"ok\n" + b"x" * 2045
#: Files nginx serves, by path: size in bytes.
FILES = {"/1m": 1 << 20, "/16m": 16 << 20, "/64m": 64 << 20}
#: The fault route's upstream timeout (a hanging upstream is answered 504 after it).
FAULT_TIMEOUT = 2.0
#: Every other route's upstream timeout.
ROUTE_TIMEOUT = 10.0


class SetupError(RuntimeError):
    """A component could not be started."""


# --------------------------------------------------------------------------------------
# restartable children


@dataclass
class Component:
    """A child process that can be killed and started again with the same argv and port."""

    name: str
    argv: list[str]
    port: int
    log_dir: Path
    ready: Callable[[ManagedProcess], None]
    env: dict[str, str] | None = None
    cwd: Path | None = None
    proc: ManagedProcess | None = None
    starts: int = 0

    def start(self) -> None:
        proc = ManagedProcess(self.argv, log_dir=self.log_dir, name=self.name, env=self.env,
                              cwd=self.cwd)
        proc.start()
        self.proc = proc
        self.starts += 1
        try:
            self.ready(proc)
        except BaseException:
            proc.stop()
            raise

    def kill(self, group: bool = False) -> None:
        """SIGKILL (the whole process group with ``group``: nginx's worker too)."""
        proc = self.proc
        if proc is None or proc.pid is None or not proc.running:
            return
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: pgid == pid
            else:
                os.kill(proc.pid, signal.SIGKILL)
        proc.stop(timeout=5)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=5, kill_timeout=5)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def stable_port(taken: set[int]) -> int:
    """A free loopback port below the kernel's ephemeral range. Components keep their
    port across restarts, so it is chosen once; an ephemeral port (``free_port``) can be
    taken meanwhile by any process's outgoing connection (it happened under load: the
    fault upstream found its port in use), one below the range cannot."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10000, max(low, 10001))
        if port in taken:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    return free_port()


def ready_line(timeout: float) -> Callable[[ManagedProcess], None]:
    def wait(proc: ManagedProcess) -> None:
        proc.wait_for_log_line("READY", timeout)
    return wait


def ready_port(port: int, timeout: float) -> Callable[[ManagedProcess], None]:
    def wait(proc: ManagedProcess) -> None:
        proc.wait_ready(lambda: port_open("127.0.0.1", port), timeout)
    return wait


def redis_pings(port: int) -> bool:
    try:
        with peers.RespClient("127.0.0.1", port, timeout=1.0) as client:
            return client.command("PING") == "PONG"
    except (OSError, peers.RedisReplyError, ValueError):
        return False


# --------------------------------------------------------------------------------------
# the nginx upstream and its files


@dataclass
class Files:
    """The large files nginx serves, mapped read-only (compared without copying)."""

    maps: dict[str, mmap.mmap] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        for m in self.maps.values():
            m.close()


def write_files(root: Path, seed: int) -> Files:
    files = Files()
    rng = random.Random(seed)
    for path, size in FILES.items():
        target = root / path.lstrip("/")
        with target.open("wb") as out:
            left = size
            while left:
                piece = min(left, 1 << 20)
                out.write(rng.randbytes(piece))
                left -= piece
        with target.open("rb") as f:
            files.maps[path] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return files


def nginx_conf(root: Path, port: int) -> str:
    user = "user root;" if os.geteuid() == 0 else ""  # workers must read our temp dir
    temp = " ".join(f"{kind}_temp_path {root}/{kind};" for kind in
                    ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    body = SMALL_BODY.decode().replace("\n", "\\n")
    return f"""{user}
worker_processes 1;
daemon off;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  {temp}
  keepalive_requests 1000000;
  keepalive_timeout 300;
  server {{
    listen 127.0.0.1:{port} backlog=1024;
    root {root}/html;
    location = / {{ default_type text/plain; return 200 "{body}"; }}
    location = /empty {{ return 204; }}
    location / {{ default_type application/octet-stream; }}
  }}
}}
"""


# --------------------------------------------------------------------------------------
# TLS


@dataclass
class Tls:
    """The gateway's certificate (all of HOSTS) and client contexts trusting its CA."""

    cert_pem: Path
    h1: ssl.SSLContext  # ALPN http/1.1
    h2: ssl.SSLContext  # ALPN h2


def make_tls(tmp: Path) -> Tls:
    import trustme

    ca = trustme.CA()
    ca.issue_cert(*HOSTS).private_key_and_cert_chain_pem.write_to_path(str(tmp / "cert.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    contexts = []
    for alpn in ("http/1.1", "h2"):
        ctx = ssl.create_default_context(cafile=str(tmp / "ca.pem"))
        ctx.set_alpn_protocols([alpn])
        contexts.append(ctx)
    return Tls(tmp / "cert.pem", *contexts)


# --------------------------------------------------------------------------------------
# gateway configuration


@dataclass
class Ports:
    plain: int
    tls: int
    nginx: int
    echo: int
    fault: int
    ws: int
    redis: int
    idp: int = 0

    def upstream_names(self) -> dict[int, str]:
        return {self.nginx: "nginx", self.echo: "echo", self.fault: "fault", self.ws: "ws",
                self.redis: "redis", self.idp: "idp"}


@dataclass
class Secrets:
    shared: str = field(default_factory=lambda: base64.b64encode(os.urandom(32)).decode())
    cookie: str = field(default_factory=lambda: base64.b64encode(os.urandom(32)).decode())


def gateway_config(kind: str, ports: Ports, issuer: str, secrets: Secrets, tls: Tls,
                   generation: int) -> dict[str, Any]:
    """The whole config file of the ``plain`` or ``tls`` gateway. ``generation`` goes into
    a response header of the reload route: the harmless change of a config reload."""
    port = ports.plain if kind == "plain" else ports.tls
    scheme = "http" if kind == "plain" else "https"

    def route(host: str, to: str, **extra: Any) -> dict[str, Any]:
        return {"from": f"{scheme}://{host}:{port}", "to": to, **extra}

    public = {"allow_public_unauthenticated_access": True}
    nginx, echo = f"http://127.0.0.1:{ports.nginx}", f"http://127.0.0.1:{ports.echo}"
    config: dict[str, Any] = {
        "address": f"127.0.0.1:{port}",
        "insecure_server": kind == "plain",
        "codec_type": "auto",
        "log_level": "info",
        "proxy_log_level": "warn",
        "default_upstream_timeout": f"{ROUTE_TIMEOUT:g}s",
        "authenticate_service_url": f"{scheme}://auth.test:{port}",
        "idp_provider": "oidc",
        "idp_provider_url": issuer,
        "idp_client_id": "gateway",
        "idp_client_secret": "secret",
        "idp_scopes": ["openid", "email", "groups", "offline_access"],
        "cookie_secure": False,
        "shared_secret": secrets.shared,
        "cookie_secret": secrets.cookie,
        "databroker_storage_type": "kvstore",
        "databroker_storage_connection_string": f"kvstore://127.0.0.1:{ports.redis}/0",
        "policy": [
            route("nginx.test", nginx, **public),
            route("echo.test", echo, **public),
            route("fault.test", f"http://127.0.0.1:{ports.fault}", timeout=f"{FAULT_TIMEOUT:g}s",
                  **public),
            route("ws.test", f"http://127.0.0.1:{ports.ws}", allow_websockets=True, **public),
            route("reload.test", nginx, set_response_headers={"X-Soak-Generation":
                                                              str(generation)}, **public),
            route("app.test", nginx, allowed_users=[USER], pass_identity_headers=True),
        ],
    }
    if kind == "tls":
        config["certificates"] = [{"cert": str(tls.cert_pem), "key": str(tls.cert_pem)}]
    return config


@dataclass
class Gateway:
    kind: str
    daemon: Daemon
    config: dict[str, Any]

    @property
    def port(self) -> int:
        return self.daemon.port

    @property
    def pid(self) -> int | None:
        return self.daemon.process.pid

    @property
    def log_path(self) -> Path:
        return self.daemon.process.log_path

    def rewrite(self, config: dict[str, Any]) -> None:
        """Replace the config file atomically (``os.replace``)."""
        self.config = config
        self.daemon.write_config(config)


# --------------------------------------------------------------------------------------
# the whole environment


@dataclass
class Env:
    tmp: Path
    ports: Ports
    tls: Tls
    files: Files
    secrets: Secrets
    issuer: str
    nginx: Component
    echo: Component
    fault: Component
    ws: Component
    redis: Component
    idp: Component
    gateways: dict[str, Gateway]
    generation: int = 0

    def components(self) -> dict[str, Component]:
        return {"nginx": self.nginx, "echo": self.echo, "fault": self.fault, "ws": self.ws,
                "redis": self.redis, "idp": self.idp}

    def redis_client(self, timeout: float = 3.0) -> peers.RespClient:
        return peers.RespClient("127.0.0.1", self.ports.redis, timeout=timeout)


def _log(msg: str) -> None:
    print(msg, flush=True)


@contextlib.contextmanager
def environment(tmp: Path, seed: int) -> Iterator[Env]:
    """Start everything; stop everything (by PID) on exit."""
    nginx_bin = nginx_binary()
    if nginx_bin is None:
        raise SetupError("nginx is not installed (apt-get install -y nginx)")
    redis_bin = peers.find_binary("redis-server")
    if redis_bin is None:
        raise SetupError(f"redis-server is not installed ({peers.REDIS_INSTALL_HINT})")
    node = peers.find_binary("node")
    if node is None:
        raise SetupError(f"node is not installed ({peers.NODE_INSTALL_HINT})")
    if not (peers.OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        raise SetupError(f"{peers.OIDC_DIR}/node_modules is missing oidc-provider (run "
                         f"`{peers.OIDC_INSTALL_HINT}` from the repository root)")

    chosen: set[int] = set()
    ports = Ports(plain=stable_port(chosen), tls=stable_port(chosen),
                  nginx=stable_port(chosen), echo=stable_port(chosen),
                  fault=stable_port(chosen), ws=stable_port(chosen),
                  redis=stable_port(chosen), idp=stable_port(chosen))
    py = sys.executable
    logs = tmp / "logs"
    logs.mkdir()
    root = tmp / "nginx"
    (root / "html").mkdir(parents=True)
    _log(f"writing {len(FILES)} upstream files ({sum(FILES.values()) >> 20} MiB)")
    files = write_files(root / "html", seed)
    (root / "nginx.conf").write_text(nginx_conf(root, ports.nginx))
    redis_dir = tmp / "redis"
    redis_dir.mkdir()
    issuer = f"http://127.0.0.1:{ports.idp}"
    callbacks = [f"http://auth.test:{ports.plain}/oauth2/callback",
                 f"https://auth.test:{ports.tls}/oauth2/callback"]

    def idp_ready(proc: ManagedProcess) -> None:
        discovery = issuer + "/.well-known/openid-configuration"
        proc.wait_ready(lambda: proc.find_log_line("READY ") == f"READY {issuer}"
                        and http_ok(discovery), 30)

    comps = {
        "nginx": Component("nginx", [nginx_bin, "-c", str(root / "nginx.conf"), "-p", str(root)],
                           ports.nginx, logs, ready_port(ports.nginx, 15)),
        "echo": Component("echo", [py, "-u", str(peers.ECHO_UPSTREAM_SCRIPT), "--port",
                                   str(ports.echo), "--name", "echo", "--quiet"],
                          ports.echo, logs, ready_line(15)),
        "fault": Component("fault", [py, "-u", str(FAULT_UPSTREAM), "--port", str(ports.fault)],
                           ports.fault, logs, ready_line(15)),
        "ws": Component("ws", [py, "-u", str(WS_ECHO), "--port", str(ports.ws)], ports.ws, logs,
                        ready_line(15)),
        # persistent (append-only file, fsync per write) so a SIGKILL loses no session
        "redis": Component("redis", [redis_bin, "--port", str(ports.redis), "--bind",
                                     "127.0.0.1", "--save", "", "--appendonly", "yes",
                                     "--appendfsync", "always", "--dir", str(redis_dir),
                                     "--daemonize", "no"], ports.redis, logs,
                           lambda p: p.wait_ready(lambda: redis_pings(ports.redis), 15)),
        "idp": Component("idp", [node, "server.js"], ports.idp, logs, idp_ready, cwd=peers.OIDC_DIR,
                         env={"PORT": str(ports.idp), "HOST": "127.0.0.1", "ISSUER": issuer,
                              "CLIENT_ID": "gateway", "CLIENT_SECRET": "secret",
                              "REDIRECT_URIS": ",".join(callbacks)}),
    }
    tls = make_tls(tmp)
    secrets = Secrets()
    started: list[Component] = []
    try:
        with contextlib.ExitStack() as stack:
            for comp in comps.values():
                _log(f"starting {comp.name} on 127.0.0.1:{comp.port}")
                comp.start()
                started.append(comp)
            gateways: dict[str, Gateway] = {}
            for kind in ("plain", "tls"):
                config = gateway_config(kind, ports, issuer, secrets, tls, 0)
                gw_dir = tmp / f"gateway-{kind}"
                gw_dir.mkdir()
                port = ports.plain if kind == "plain" else ports.tls
                _log(f"starting the {kind} gateway on 127.0.0.1:{port}")
                daemon = stack.enter_context(gateway_daemon(gw_dir, config, port=port,
                                                             timeout=30))
                gateways[kind] = Gateway(kind, daemon, config)
            yield Env(tmp, ports, tls, files, secrets, issuer, comps["nginx"], comps["echo"],
                      comps["fault"], comps["ws"], comps["redis"], comps["idp"], gateways)
    finally:
        for comp in reversed(started):
            with contextlib.suppress(Exception):
                comp.stop()
        files.close()


# --------------------------------------------------------------------------------------
# /proc: descriptors, memory, sockets


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
              "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
              "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


def rss_kib(pid: int) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _other_sockets(pid: int) -> set[str]:
    """Inodes of the UNIX and UDP sockets in the process's network namespace."""
    inodes: set[str] = set()
    for name, column in (("unix", 6), ("udp", 9), ("udp6", 9)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
                f = line.split()
                if len(f) > column:
                    inodes.add(f[column])
    return inodes


def _tcp_table(pid: int) -> dict[str, tuple[int, int, str]]:
    """inode -> (local port, remote port, state) for the process's network namespace."""
    table: dict[str, tuple[int, int, str]] = {}
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
                f = line.split()
                if len(f) < 10:
                    continue
                local, remote, state, inode = f[1], f[2], f[3], f[9]
                table[inode] = (int(local.rsplit(":", 1)[1], 16),
                                int(remote.rsplit(":", 1)[1], 16), TCP_STATES.get(state, state))
    return table


@dataclass
class FdSnapshot:
    """A gateway's descriptors, sorted by what they are."""

    total: int = 0
    rss_kib: int = 0
    fixed: int = 0  # files, pipes, epoll, eventfd, listening and non-TCP sockets
    dead: int = 0  # TCP sockets whose connection is gone (reset/closed), still open
    downstream: int = 0  # TCP connections on the gateway's own port (clients)
    upstream: dict[str, int] = field(default_factory=dict)  # by peer name
    close_wait: int = 0
    other_tcp: int = 0

    def upstream_total(self) -> int:
        return sum(self.upstream.values())

    def pooled(self) -> int:
        """Connections to the HTTP upstreams (not Redis, not the identity provider)."""
        return sum(v for k, v in self.upstream.items() if k not in ("redis", "idp"))

    def describe(self) -> str:
        ups = ", ".join(f"{k} {v}" for k, v in sorted(self.upstream.items())) or "none"
        return (f"{self.total} fds ({self.fixed} fixed, {self.downstream} client conns, "
                f"upstream conns: {ups}, CLOSE_WAIT {self.close_wait}, dead sockets "
                f"{self.dead})")


def fd_snapshot(pid: int, own_port: int, peer_names: dict[int, str]) -> FdSnapshot:
    snap = FdSnapshot(rss_kib=rss_kib(pid))
    try:
        links = []
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    except OSError:
        snap.total = -1
        return snap
    snap.total = len(links)
    table = _tcp_table(pid)
    others = _other_sockets(pid)
    for link in links:
        if not link.startswith("socket:["):
            snap.fixed += 1
            continue
        inode = link[8:-1]
        entry = table.get(inode)
        if entry is None and inode not in others:
            snap.dead += 1  # a TCP socket no longer in any table: closed, fd kept
            continue
        if entry is None or entry[2] == "LISTEN":
            snap.fixed += 1  # listening, UNIX or UDP sockets
            continue
        local, remote, state = entry
        if state == "CLOSE_WAIT":
            snap.close_wait += 1
        if local == own_port:
            snap.downstream += 1
        elif remote in peer_names:
            name = peer_names[remote]
            snap.upstream[name] = snap.upstream.get(name, 0) + 1
        else:
            snap.other_tcp += 1
    return snap


def json_log_lines(path: Path) -> Iterator[tuple[int, str, dict[str, Any] | None]]:
    """(line number, raw line, parsed JSON or None) for every line of a gateway log."""
    with path.open("r", errors="replace") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            try:
                parsed = json.loads(line)
            except ValueError:
                parsed = None
            yield number, line, parsed if isinstance(parsed, dict) else None


def wait_closed(port: int, timeout: float = 5.0) -> bool:
    """True once nothing accepts connections on ``port``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
        except OSError:
            return True
        time.sleep(0.05)
    return False
