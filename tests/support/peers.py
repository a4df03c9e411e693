"""Real peers for integration tests: echo upstream, redis-server, node-oidc-provider.

Each factory is a context manager that starts the peer on a free loopback port, waits
(bounded) until it answers, yields a small frozen description of it, and stops the
process by PID on exit, also when the body raised::

    with echo_upstream(tmp_path, name="app") as up:
        urllib.request.urlopen(up.url + "/status/204")

Missing external programs raise :class:`MissingBinary` (pytest fixtures turn that into a
skip, or into a failure under CI); a present but unprepared peer (node_modules missing)
raises :class:`PeerSetupError` with the command that fixes it.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sys
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Self, TypeAlias

from .processes import ManagedProcess, ProcessError, free_port, http_ok, loopback_opener

__all__ = [
    "ECHO_UPSTREAM_SCRIPT",
    "OIDC_DIR",
    "MissingBinary",
    "OIDCProvider",
    "PeerSetupError",
    "Redis",
    "RedisReplyError",
    "RespClient",
    "Upstream",
    "echo_upstream",
    "find_binary",
    "oidc_provider",
    "redis_server",
    "resp_encode",
    "resp_read",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = REPO_ROOT / "tests" / "peers"
ECHO_UPSTREAM_SCRIPT = PEERS_DIR / "echo_upstream.py"
OIDC_DIR = PEERS_DIR / "oidc"
OIDC_INSTALL_HINT = "npm ci --prefix tests/peers/oidc"
REDIS_INSTALL_HINT = "apt-get install -y redis-server"
NODE_INSTALL_HINT = "install Node.js >= 20 (with npm), then " + OIDC_INSTALL_HINT

#: Attempts to start a peer on a fresh free port when the port was taken meanwhile.
PORT_ATTEMPTS = 3
_ADDR_IN_USE_MARKERS = ("Address already in use", "EADDRINUSE")


class MissingBinary(RuntimeError):
    """An external program a peer needs is not installed."""

    def __init__(self, binary: str, hint: str) -> None:
        super().__init__(f"{binary!r} not found on PATH; to install: {hint}")
        self.binary = binary
        self.hint = hint


class PeerSetupError(RuntimeError):
    """A peer's program exists but its files are not prepared."""


def find_binary(name: str) -> str | None:
    """Full path of ``name`` on PATH, or in the sbin/local dirs not always on PATH."""
    found = shutil.which(name)
    if found:
        return found
    extra = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/sbin"
    return shutil.which(name, path=extra)


def _require_binary(name: str, hint: str) -> str:
    path = find_binary(name)
    if path is None:
        raise MissingBinary(name, hint)
    return path


def _address_in_use(proc: ManagedProcess) -> bool:
    text = proc.log_text()
    return any(marker in text for marker in _ADDR_IN_USE_MARKERS)


def start_on_free_port(
    make: Callable[[int], ManagedProcess],
    ready: Callable[[ManagedProcess, int], None],
    host: str,
) -> tuple[ManagedProcess, int]:
    """Start ``make(port)`` on a free port and run ``ready``; on "address in use" (the
    port was grabbed between probing and binding) retry on a new port, at most
    :data:`PORT_ATTEMPTS` times. The process is stopped if it never becomes ready."""
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port(host)
        proc = make(port).start()
        try:
            ready(proc, port)
        except ProcessError:
            proc.stop()
            if attempt < PORT_ATTEMPTS and _address_in_use(proc):
                continue
            raise
        except BaseException:
            proc.stop()
            raise
        return proc, port
    raise AssertionError("unreachable")  # pragma: no cover


def _host_in_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# ------------------------------------------------------------------ echo upstream


@dataclass(frozen=True)
class Upstream:
    """A running ``tests/peers/echo_upstream.py``."""

    url: str
    port: int
    process: ManagedProcess
    name: str
    host: str = "127.0.0.1"

    def url_for(self, path: str) -> str:
        """``url`` + ``path`` (``path`` starts with ``/``)."""
        return self.url + path


@contextlib.contextmanager
def echo_upstream(
    tmpdir: Path,
    name: str = "upstream",
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    quiet: bool = False,
    timeout: float = 15.0,
    tls_cert: Path | None = None,
    client_ca: Path | None = None,
) -> Iterator[Upstream]:
    """Run the echo upstream. ``port=0`` lets the server bind a free port itself (no
    race); its ``READY <port>`` line tells which one. ``tls_cert`` serves HTTPS (the
    URL is then https://), ``client_ca`` also requires client certificates."""
    argv = [
        sys.executable,
        "-u",
        str(ECHO_UPSTREAM_SCRIPT),
        "--host",
        host,
        "--port",
        str(port),
        "--name",
        name,
    ]
    if quiet:
        argv.append("--quiet")
    if tls_cert is not None:
        argv += ["--tls-cert", str(tls_cert)]
    if client_ca is not None:
        argv += ["--client-ca", str(client_ca)]
    scheme = "https" if tls_cert is not None else "http"
    with ManagedProcess(argv, log_dir=Path(tmpdir), name=f"echo-{name}") as proc:
        line = proc.wait_for_log_line("READY ", timeout)
        bound = int(line.split()[1])
        yield Upstream(
            url=f"{scheme}://{_host_in_url(host)}:{bound}",
            port=bound,
            process=proc,
            name=name,
            host=host,
        )


# ------------------------------------------------------------------- tcp service

TCP_ECHO_SCRIPT = PEERS_DIR / "tcp_echo.py"


@dataclass(frozen=True)
class TcpService:
    """A running ``tests/peers/tcp_echo.py``."""

    port: int
    process: ManagedProcess

    def accepts(self) -> int:
        """Connections it accepted so far."""
        return self.process.log_text().count("ACCEPT ")


@contextlib.contextmanager
def tcp_service(tmpdir: Path, name: str = "tcp", timeout: float = 15.0) -> Iterator[TcpService]:
    """Run the TCP echo/sink/source service on a free loopback port."""
    argv = [sys.executable, "-u", str(TCP_ECHO_SCRIPT), "--host", "127.0.0.1", "--port", "0"]
    with ManagedProcess(argv, log_dir=Path(tmpdir), name=name) as proc:
        line = proc.wait_for_log_line("READY ", timeout)
        yield TcpService(int(line.split()[1]), proc)


# -------------------------------------------------------------------------- redis

RespReply: TypeAlias = "str | bytes | int | list[RespReply] | None"
_RESP_MAX_DEPTH = 8
_RESP_MAX_LINE = 64 * 1024


class RedisReplyError(RuntimeError):
    """Redis answered with an error reply (``-ERR ...``)."""


def resp_encode(*args: str | bytes | int) -> bytes:
    """Encode one command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _resp_line(stream: BinaryIO) -> bytes:
    line = stream.readline(_RESP_MAX_LINE)
    if not line.endswith(b"\r\n"):
        raise ConnectionError(f"truncated RESP reply: {line!r}")
    return line[:-2]


def resp_read(stream: BinaryIO, _depth: int = 0) -> RespReply:
    """Read one RESP2 reply. Error replies raise :class:`RedisReplyError`."""
    if _depth > _RESP_MAX_DEPTH:
        raise ConnectionError("RESP reply nested too deeply")
    line = _resp_line(stream)
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RedisReplyError(rest.decode(errors="replace"))
    if kind == b":":
        return int(rest)
    if kind == b"$":
        size = int(rest)
        if size < 0:
            return None
        data = stream.read(size + 2)
        if len(data) != size + 2:
            raise ConnectionError("truncated RESP bulk string")
        return data[:-2]
    if kind == b"*":
        count = int(rest)
        if count < 0:
            return None
        return [resp_read(stream, _depth + 1) for _ in range(count)]
    raise ConnectionError(f"unexpected RESP reply {line!r}")


class RespClient:
    """Minimal blocking RESP2 client over a raw socket (tests only, loopback only)."""

    def __init__(
        self, host: str, port: int, *, password: str | None = None, timeout: float = 5.0
    ) -> None:
        self._sock = socket.create_connection((host, port), timeout=timeout)
        self._file = self._sock.makefile("rb")
        if password is not None:
            try:
                self.command("AUTH", password)
            except BaseException:
                self.close()
                raise

    def command(self, *args: str | bytes | int) -> RespReply:
        self._sock.sendall(resp_encode(*args))
        return resp_read(self._file)

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Redis:
    """A running redis-server (foreground, no persistence)."""

    host: str
    port: int
    url: str
    process: ManagedProcess
    password: str | None = None

    def client(self, timeout: float = 5.0) -> RespClient:
        """A raw RESP connection, already authenticated if a password is set."""
        return RespClient(self.host, self.port, password=self.password, timeout=timeout)


def _redis_pings(host: str, port: int, password: str | None) -> bool:
    try:
        with RespClient(host, port, password=password, timeout=1.0) as client:
            return client.command("PING") == "PONG"
    except (OSError, RedisReplyError, ValueError):
        return False


@contextlib.contextmanager
def redis_server(
    tmpdir: Path,
    password: str | None = None,
    *,
    host: str = "127.0.0.1",
    extra_args: Sequence[str] = (),
    timeout: float = 15.0,
) -> Iterator[Redis]:
    """Run ``redis-server`` in the foreground (so its PID is ours) with persistence off.
    ``extra_args`` are appended as-is (e.g. ``["--maxmemory", "10mb"]``)."""
    binary = _require_binary("redis-server", REDIS_INSTALL_HINT)
    tmpdir = Path(tmpdir)
    tmpdir.mkdir(parents=True, exist_ok=True)
    data_dir = Path(tempfile.mkdtemp(prefix="redis-", dir=tmpdir))

    def make(port: int) -> ManagedProcess:
        argv = [binary, "--port", str(port), "--bind", host, "--save", "",
                "--appendonly", "no", "--dir", str(data_dir), "--daemonize", "no"]
        if password is not None:
            argv += ["--requirepass", password]
        argv += list(extra_args)
        return ManagedProcess(argv, log_dir=tmpdir, name=f"redis-{port}")

    def ready(proc: ManagedProcess, port: int) -> None:
        proc.wait_ready(lambda: _redis_pings(host, port, password), timeout)

    proc, port = start_on_free_port(make, ready, host)
    auth = f":{urllib.parse.quote(password, safe='')}@" if password is not None else ""
    try:
        yield Redis(
            host=host,
            port=port,
            url=f"redis://{auth}{_host_in_url(host)}:{port}/0",
            process=proc,
            password=password,
        )
    finally:
        proc.stop()


# --------------------------------------------------------------- oidc-provider


@dataclass(frozen=True)
class OIDCProvider:
    """A running ``tests/peers/oidc/server.js`` (node-oidc-provider, dev interactions)."""

    issuer: str
    port: int
    process: ManagedProcess
    client_id: str
    client_secret: str
    redirect_uris: tuple[str, ...]
    token_auth_method: str

    @property
    def discovery_url(self) -> str:
        return self.issuer + "/.well-known/openid-configuration"

    def discovery(self, timeout: float = 5.0) -> dict[str, Any]:
        """The parsed discovery document."""
        with loopback_opener().open(self.discovery_url, timeout=timeout) as resp:
            doc: dict[str, Any] = json.load(resp)
        return doc


@contextlib.contextmanager
def oidc_provider(
    tmpdir: Path,
    redirect_uris: Sequence[str] = ("http://127.0.0.1/oauth2/callback",),
    *,
    client_id: str = "gateway",
    client_secret: str = "secret",
    token_auth_method: str = "client_secret_basic",
    post_logout_redirect_uris: Sequence[str] | None = None,
    host: str = "127.0.0.1",
    timeout: float = 30.0,
    access_token_ttl: int = 3600,
    rotate_refresh_tokens: bool = False,
    cookie_prefix: str = "",
    backchannel_logout_uri: str = "",
) -> Iterator[OIDCProvider]:
    """Run ``node server.js`` from :data:`OIDC_DIR` (``npm ci`` must have been run).
    ``access_token_ttl`` (seconds) makes tokens expire early, for refresh tests;
    ``rotate_refresh_tokens`` makes each refresh rotate the refresh token and refuse (and
    revoke the grant of) one used again, logging each refresh granted. ``cookie_prefix``
    names the provider's cookies apart from another instance's on 127.0.0.1 (a browser
    keeps cookies per host, whatever the port). ``backchannel_logout_uri``: registered
    for the client (with ``backchannel_logout_session_required``), so ending a session
    at the provider posts a logout token there."""
    node = _require_binary("node", NODE_INSTALL_HINT)
    if not (OIDC_DIR / "node_modules" / "oidc-provider" / "package.json").is_file():
        raise PeerSetupError(
            f"{OIDC_DIR / 'node_modules'} is missing oidc-provider; "
            f"run `{OIDC_INSTALL_HINT}` from the repository root first"
        )
    if isinstance(redirect_uris, str):
        raise TypeError("redirect_uris must be a sequence of URLs, not one string")
    uris = tuple(redirect_uris)
    tmpdir = Path(tmpdir)

    def issuer_for(port: int) -> str:
        return f"http://{_host_in_url(host)}:{port}"

    def make(port: int) -> ManagedProcess:
        env = {
            "PORT": str(port),
            "HOST": host,
            "ISSUER": issuer_for(port),
            "CLIENT_ID": client_id,
            "CLIENT_SECRET": client_secret,
            "REDIRECT_URIS": ",".join(uris),
            "TOKEN_AUTH_METHOD": token_auth_method,
            "ACCESS_TOKEN_TTL": str(access_token_ttl),
            "ROTATE_REFRESH_TOKENS": "1" if rotate_refresh_tokens else "0",
            "COOKIE_PREFIX": cookie_prefix,
        }
        if post_logout_redirect_uris is not None:
            env["POST_LOGOUT_REDIRECT_URIS"] = ",".join(post_logout_redirect_uris)
        if backchannel_logout_uri:
            env["BACKCHANNEL_LOGOUT_URI"] = backchannel_logout_uri
        return ManagedProcess(
            [node, "server.js"], log_dir=tmpdir, name=f"oidc-{port}", env=env, cwd=OIDC_DIR
        )

    def ready(proc: ManagedProcess, port: int) -> None:
        expected = f"READY {issuer_for(port)}"
        discovery = issuer_for(port) + "/.well-known/openid-configuration"
        proc.wait_ready(
            lambda: proc.find_log_line("READY ") == expected and http_ok(discovery), timeout
        )

    proc, port = start_on_free_port(make, ready, host)
    try:
        yield OIDCProvider(
            issuer=issuer_for(port),
            port=port,
            process=proc,
            client_id=client_id,
            client_secret=client_secret,
            redirect_uris=uris,
            token_auth_method=token_auth_method,
        )
    finally:
        proc.stop()
