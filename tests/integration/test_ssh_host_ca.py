"""Native SSH with upstream host certificates (issue 31, ``ssh_upstream_host_ca``):
real OpenSSH ``sshd``s, each with a host key and a ``HostCertificate`` that
``ssh-keygen -s CA -h`` signed, routes that trust the CA and list no host key, the
real OpenSSH client through the gateway, sign-in at node-oidc-provider through the
test browser.

A good certificate lets the command run, for each key family (ed25519, ECDSA under
an RSA CA, RSA); one from another CA, an expired one, one for another host and a
server without a certificate are refused before anything authenticates to the server
(its log shows the gateway's connection and no authentication), the person gets one
line, and the gateway's log names the route, the certificate and the reason. So are
revoked keys (``@revoked``: a certificate's key, its CA, a plain key on a trust on
first use route, until a reload takes the line out) and a certificate whose serial a
KRL from ``ssh-keygen -k`` revokes."""

from __future__ import annotations

import contextlib
import getpass
import os
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import find_binary, oidc_provider
from tests.support.processes import (
    ManagedProcess,
    ProcessError,
    free_port,
    port_open,
    wait_until,
)
from tests.support.ssh_native import GatewayKeys, gateway_keys, keygen, sign_in_ssh, ssh_argv
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration
ALICE = "alice@example.test"
WRONG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


@dataclass(frozen=True)
class Server:
    port: int
    process: ManagedProcess

    def log(self) -> str:
        return self.process.log_text()


def sign(ca: Path, key: Path, *args: str) -> None:
    subprocess.run([find_binary("ssh-keygen") or "ssh-keygen", "-q", "-h", "-s", str(ca), *args,
                    f"{key}.pub"], check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def cert_server(run: Path, ca_public: str, kind: str, ca: Path | None, *sign_args: str,
                extra: tuple[str, ...] = ()) -> Iterator[Server]:
    """An sshd trusting ``ca_public`` for users, with one ``kind`` host key and (unless
    ``ca`` is None) its certificate, signed by ``ca`` with ``sign_args``; ``extra``
    sshd_config lines."""
    sshd = os.path.abspath(find_binary("sshd") or "sshd")
    run.mkdir(parents=True)
    host_key = keygen(run / f"host_{kind}", "server host", kind)
    lines = [f"HostKey {host_key}"]
    if ca is not None:
        sign(ca, host_key, *sign_args)
        lines.append(f"HostCertificate {host_key}-cert.pub")
    (run / "user_ca.pub").write_text(ca_public + "\n")
    (run / "sshd_config").write_text("\n".join([  # sshd keeps a setting's first value
        *extra, "ListenAddress 127.0.0.1", *lines, "PidFile none", "UsePAM no", "StrictModes no",
        "PubkeyAuthentication yes", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "AuthorizedKeysFile none",
        f"TrustedUserCAKeys {run / 'user_ca.pub'}", f"AllowUsers {getpass.getuser()}",
        "PrintMotd no", "LogLevel VERBOSE", ""]))
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    for attempt in range(3):
        port = free_port()
        process = ManagedProcess([sshd, "-D", "-e", "-f", str(run / "sshd_config"),
                                  "-p", str(port)], log_dir=run, name=f"sshd-{port}")
        process.start()
        try:
            process.wait_ready(lambda port=port: port_open("127.0.0.1", port), 15)
        except ProcessError:
            process.stop()
            if attempt < 2 and "Address already in use" in process.log_text():
                continue
            raise
        break
    try:
        yield Server(port, process)
    finally:
        process.stop()


def write_krl(cas: Path, spec: str) -> None:
    """``cas/revoked.krl`` as ``ssh-keygen -k`` writes it from ``spec``, for the host
    CA's certificates."""
    (cas / "krl_spec").write_text(spec + "\n")
    made = subprocess.run([find_binary("ssh-keygen") or "ssh-keygen", "-k", "-f",
                           str(cas / "revoked.krl"), "-s", str(cas / "host_ca.pub"),
                           str(cas / "krl_spec")], capture_output=True, timeout=30)
    assert made.returncode == 0, made.stderr


@dataclass
class Env:
    tmp: Path
    keys: GatewayKeys
    servers: dict[str, Server]
    gateway: Daemon
    ssh_port: int

    def ssh(self, route: str, *command: str) -> subprocess.CompletedProcess[bytes]:
        argv = ssh_argv(self.keys.client_key, self.ssh_port, f"{getpass.getuser()}@{route}",
                        *command, options=("BatchMode=yes",))
        return subprocess.run(argv, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)

    def rewrite_route(self, name: str, change: Callable[[dict[str, Any]], dict[str, Any]]
                      ) -> None:
        """The running config again with route ``ssh://name`` changed (a reload)."""
        written = yaml.safe_load(self.gateway.config_path.read_text())
        self.gateway.write_config({**written, "policy": [
            change(route) if route["from"] == f"ssh://{name}" else route
            for route in written["policy"]]})

    def ssh_until(self, route: str, met: Callable[[subprocess.CompletedProcess[bytes]], bool],
                  what: str) -> subprocess.CompletedProcess[bytes]:
        """``ssh ... true`` through ``route`` until ``met`` (a reload has taken); the
        last tries and the gateway's log when it never is."""
        tries: list[subprocess.CompletedProcess[bytes]] = []

        def again() -> bool:
            tries.append(self.ssh(route, "true"))
            return met(tries[-1])
        try:
            wait_until(again, 15, what=what)
        except TimeoutError:
            raise AssertionError(([t.stderr for t in tries[-3:]],
                                  self.gateway.process.log_text()[-3000:])) from None
        return tries[-1]


VALID = ("-n", "127.0.0.1,localhost", "-V", "-5m:+1h")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    for name in ("sshd", "ssh", "ssh-keygen"):
        if find_binary(name) is None:
            pytest.fail(f"{name} is missing: apt-get install -y openssh-server openssh-client")
    tmp = tmp_path_factory.mktemp("ssh-host-ca")
    keys = gateway_keys(tmp)
    cas = tmp / "cas"
    cas.mkdir()
    host_ca = keygen(cas / "host_ca", "host CA")
    rsa_ca = keygen(cas / "rsa_host_ca", "RSA host CA", "rsa")
    other_ca = keygen(cas / "other_ca", "another CA")
    host_ca_pub = (cas / "host_ca.pub").read_text().strip()
    rsa_ca_pub = (cas / "rsa_host_ca.pub").read_text().strip()
    # the file form, as a known_hosts file shared by many routes holds it
    (cas / "known_hosts").write_text(
        f"@cert-authority *.example.test {host_ca_pub}\n"
        f"@cert-authority [127.0.0.1]:* {rsa_ca_pub}\n")
    plans: dict[str, tuple[str, Path | None, tuple[str, ...]]] = {
        "db": ("ed25519", host_ca, ("-I", "db host", "-z", "41", *VALID)),
        "ecdsa": ("ecdsa", rsa_ca, ("-I", "ecdsa host", "-z", "42", *VALID)),
        "rsa": ("rsa", host_ca, ("-I", "rsa host", "-z", "43", *VALID)),
        "otherca": ("ed25519", other_ca, ("-I", "other", "-z", "44", *VALID)),
        "expired": ("ed25519", host_ca, ("-I", "old", "-z", "45", "-n", "127.0.0.1",
                                         "-V", "20200101:20200102")),
        "wrongname": ("ed25519", host_ca, ("-I", "elsewhere", "-z", "46", "-n",
                                           "db.example.test", "-V", "-5m:+1h")),
        "nocert": ("ed25519", None, ()),
        "rekey": ("ecdsa", host_ca, ("-I", "rekeying host", "-z", "47", *VALID)),
        # @revoked: the certificate's key, its CA, a plain key trusted on first use
        "revokedkey": ("ed25519", host_ca, ("-I", "stolen host", "-z", "48", *VALID)),
        "revokedca": ("ed25519", host_ca, ("-I", "fleet host", "-z", "49", *VALID)),
        "revokedplain": ("ed25519", None, ()),
        "krlserial": ("ed25519", host_ca, ("-I", "krl host", "-z", "50", *VALID)),
    }
    write_krl(cas, "serial: 50-59")
    port, ssh_port = free_port(), free_port()
    with contextlib.ExitStack() as stack:
        servers = {name: stack.enter_context(cert_server(
            tmp / name, keys.ca_public, kind, ca, *args,
            extra=("RekeyLimit 256K", "LogLevel DEBUG") if name == "rekey" else ()))
            for name, (kind, ca, args) in plans.items()}
        op = stack.enter_context(oidc_provider(tmp, [callback_uri(port)]))
        allow = {"allow": {"and": [{"email": {"is": ALICE}},
                                   {"ssh_username": {"is": getpass.getuser()}}]}}
        routes: list[dict[str, Any]] = []
        for name, server in servers.items():
            route: dict[str, Any] = {"from": f"ssh://{name}",
                                     "to": f"ssh://127.0.0.1:{server.port}", "policy": allow}
            host_public = " ".join((tmp / name / "host_ed25519.pub").read_text().split()[:2]) \
                if name.startswith("revoked") else ""
            if name == "ecdsa":
                route["ssh_upstream_host_ca_file"] = str(cas / "known_hosts")
            elif name == "revokedkey":
                route["ssh_upstream_host_ca"] = [host_ca_pub]
                route["ssh_upstream_host_keys"] = [f"@revoked * {host_public} stolen"]
            elif name == "revokedca":  # the fleet's file revokes a CA it still names
                (cas / "fleet_known_hosts").write_text(
                    f"@cert-authority * {host_ca_pub}\n@revoked * {host_ca_pub}\n")
                route["ssh_upstream_host_ca_file"] = str(cas / "fleet_known_hosts")
            elif name == "krlserial":
                route["ssh_upstream_host_ca"] = [host_ca_pub]
                route["ssh_upstream_revoked_keys_file"] = str(cas / "revoked.krl")
            elif name == "revokedplain":
                route["ssh_upstream_host_key_tofu"] = True
                route["ssh_upstream_host_keys"] = [
                    f"@revoked [127.0.0.1]:{server.port} {host_public}"]
            elif name == "rsa":  # a key that is not the server's beside the CA
                route["ssh_upstream_host_keys"] = [WRONG_KEY]
                route["ssh_upstream_host_ca"] = f"{host_ca_pub}\n{rsa_ca_pub}"
            else:
                route["ssh_upstream_host_ca"] = [host_ca_pub]
            routes.append(route)
        config = {**signing_in_config(op, port, routes),
                  "ssh_address": f"127.0.0.1:{ssh_port}",
                  "ssh_host_key_files": [str(keys.host_key)],
                  "ssh_user_ca_key_file": str(keys.user_ca)}
        gateway = stack.enter_context(gateway_daemon(tmp, config, port=port))
        wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
        environment = Env(tmp, keys, servers, gateway, ssh_port)
        proc, seen, _ = sign_in_ssh(
            ssh_argv(keys.client_key, ssh_port, f"{getpass.getuser()}@db", "echo signed in",
                     options=()), ALICE)
        out, err = proc.communicate(timeout=60)
        assert (proc.returncode, out) == (0, b"signed in\n"), seen + err
        yield environment


@pytest.mark.parametrize("route", ["db", "ecdsa", "rsa"])
def test_a_certificate_from_the_routes_ca_is_accepted(env: Env, route: str) -> None:
    """The route lists no host key: the server's host certificate, signed by the
    route's CA for 127.0.0.1, is the only thing trusted, and the command runs. Each
    key family (the ECDSA one under an RSA CA, given as an @cert-authority line of a
    known_hosts file) negotiates its own certificate algorithm."""
    done = env.ssh(route, "echo through; echo $((6 * 7))")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.split() == [b"through", b"42"]
    log = env.servers[route].log()
    assert "Accepted certificate ID" in log, log


@pytest.mark.parametrize(("route", "reason"), [
    ("otherca", "its CA is not one this route trusts"),
    ("expired", "expired at 2020-01-02T00:00:00Z"),
    ("wrongname", "it is not for 127.0.0.1 (its hosts: db.example.test)"),
])
def test_a_certificate_that_does_not_hold_is_refused(env: Env, route: str, reason: str
                                                     ) -> None:
    """Nothing authenticates to the server: its log shows the gateway connecting and
    no authentication; the person gets one line with the reason, and the gateway's
    log line names the route, the certificate's key id, serial and CA."""
    done = env.ssh(route, "true")
    assert done.returncode == 255, done.stderr.decode()
    told = [line for line in done.stderr.decode().splitlines() if "certificate" in line]
    assert len(told) == 1, done.stderr  # one line, beside ssh's own
    assert f"route {route}: the server's host certificate is refused: {reason} (key id" \
        in told[0], told
    log = env.servers[route].log()
    assert "Connection from 127.0.0.1" in log, log
    for word in ("Accepted", "Failed", "userauth", "Postponed"):
        assert word not in log, log
    event = env.gateway.wait_for_event(
        lambda e: e.get("route") == route and reason in e.get("reason", ""),
        what="the refusal's log line")
    assert "key id '" in event["reason"] and "serial 4" in event["reason"], event
    assert "CA SHA256:" in event["reason"], event


def test_the_server_rekeying_shows_its_certificate_again(env: Env) -> None:
    """sshd renews the session keys every 256 KiB here (RekeyLimit): each new key
    exchange checks the certificate again and is signed by its key, and the 4 MiB
    stream goes on whole."""
    done = env.ssh("rekey", "head -c 4194304 /dev/zero")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == bytes(4194304)
    exchanges = env.servers["rekey"].log().count("SSH2_MSG_NEWKEYS received")
    assert exchanges >= 8, exchanges  # the first, and one per 256 KiB or so


def test_a_server_without_a_certificate_is_refused(env: Env) -> None:
    """A route with a CA only: a server showing a plain key is refused as a key the
    route does not trust (never pinned), its key named in the log."""
    done = env.ssh("nocert", "true")
    assert done.returncode == 255
    assert b"host key is not the one this route trusts" in done.stderr, done.stderr
    assert "Accepted" not in env.servers["nocert"].log()
    event = env.gateway.wait_for_event(
        lambda e: e.get("route") == "nocert" and "is not the trusted" in
        e.get("message", ""), what="the host key log line")
    assert event["shown"].startswith("SHA256:"), event


@pytest.mark.parametrize(("route", "what"), [
    ("revokedkey", "the key of the server's host certificate SHA256:"),
    ("revokedca", "the CA of the server's host certificate SHA256:"),
    ("revokedplain", "the server's host key SHA256:"),
    ("krlserial", "the server's host certificate (key id 'krl host', serial 50, CA SHA256:"),
])
def test_a_revoked_key_is_refused(env: Env, route: str, what: str) -> None:
    """``@revoked``: a certificate whose key or CA is revoked, or a plain key the route
    would otherwise pin on first use; a KRL ``ssh-keygen -k`` wrote revoking the
    certificate's serial (``ssh_upstream_revoked_keys_file``). Each is refused before
    anything authenticates to the server; the person is told which key or certificate,
    the log line names the route and it."""
    done = env.ssh(route, "true")
    assert done.returncode == 255, done.stderr.decode()
    assert f"route {route}: {what}".encode() in done.stderr, done.stderr
    assert b" is revoked" in done.stderr, done.stderr
    log = env.servers[route].log()
    assert "Connection from 127.0.0.1" in log, log
    for word in ("Accepted", "Failed publickey", "userauth", "Postponed"):
        assert word not in log, log
    event = env.gateway.wait_for_event(
        lambda e: e.get("route") == route and "is revoked; refused" in
        str(e.get("message", "")), what="the revocation's log line")
    assert event["shown"].startswith(what), event
    if route == "revokedplain":  # never pinned
        assert not env.gateway.logged("route revokedplain: pinned"), "pinned"


def test_a_revoked_line_removed_by_a_reload_lets_the_server_in(env: Env) -> None:
    """The same route, its @revoked line taken out by a config reload: trust on first
    use pins the key and the command runs (runs after the refusal above: module
    order)."""
    env.rewrite_route("revokedplain", lambda route: {
        k: v for k, v in route.items() if k != "ssh_upstream_host_keys"})
    env.ssh_until("revokedplain", lambda done: done.returncode == 0, "the reloaded route")
    done = env.ssh("revokedplain", "echo in")
    assert (done.returncode, done.stdout) == (0, b"in\n"), done.stderr
    assert env.gateway.logged("route revokedplain: pinned the server's host key")


def test_a_pinned_key_revoked_later_is_refused(env: Env) -> None:
    """The key pinned just above, revoked again by a reload: the pin does not let it in
    (runs after the reload above: module order)."""
    host_public = " ".join(
        (env.tmp / "revokedplain" / "host_ed25519.pub").read_text().split()[:2])
    env.rewrite_route("revokedplain", lambda route: {
        **route, "ssh_upstream_host_keys": [f"@revoked * {host_public}"]})
    done = env.ssh_until("revokedplain", lambda done: done.returncode == 255
                         and b"is revoked" in done.stderr, "the revocation reloaded")
    assert b"route revokedplain: the server's host key SHA256:" in done.stderr, done.stderr


def test_a_new_krl_is_read_without_a_config_change(env: Env) -> None:
    """``ssh-keygen -k`` writes the KRL again without serial 50 (the operator took the
    revocation back): the gateway reloads on the file's change alone and the server
    is let in."""
    write_krl(env.tmp / "cas", "serial: 51-59")
    env.ssh_until("krlserial", lambda done: done.returncode == 0, "the rewritten KRL read")
