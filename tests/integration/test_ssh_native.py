"""Native SSH (issue 31): ``ssh LOGIN@ROUTE@gateway`` against a real OpenSSH ``sshd``
that trusts only the gateway's user CA, with the real OpenSSH client (``ssh``, ``scp``,
``sftp``; under a pseudo-terminal where a terminal matters), sign-in at
node-oidc-provider through the test browser.

One gateway, sshd and provider serve the module; the tests that end the session (a
policy reload, a sign-out) come last."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import Browser
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import OIDCProvider, find_binary, oidc_provider
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import (
    CertSshd,
    GatewayKeys,
    PtyProcess,
    cert_sshd,
    gateway_keys,
    keygen,
    read_until,
    sign_in_ssh,
    ssh_argv,
)
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration
ALICE = "alice@example.test"
BOB = "bob@example.test"
WRONG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
TTL = 120


@dataclass
class Env:
    tmp: Path
    keys: GatewayKeys
    sshd: CertSshd
    op: OIDCProvider
    gateway: Daemon
    ssh_port: int
    http_port: int
    config: dict[str, Any]

    def argv(self, user: str, *command: str, options: tuple[str, ...] = ("BatchMode=yes",),
             key: Path | None = None) -> list[str]:
        return ssh_argv(key or self.keys.client_key, self.ssh_port, user, *command,
                        options=options)

    def ssh(self, user: str, *command: str, key: Path | None = None,
            options: tuple[str, ...] = ("BatchMode=yes",), timeout: float = 60
            ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(self.argv(user, *command, options=options, key=key),
                              capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def route_config(self, db_policy: dict[str, Any]) -> dict[str, Any]:
        return {**self.written(), "policy": routes(self.sshd, db_policy)}

    def written(self) -> dict[str, Any]:
        """The configuration as ``gateway_daemon`` wrote it (with its address)."""
        return {**self.config, "insecure_server": True,
                "address": f"127.0.0.1:{self.http_port}"}


def db_policy(sshd: CertSshd) -> dict[str, Any]:
    return {"allow": {"and": [{"email": {"is": ALICE}}, {"ssh_username": {"is": sshd.user}}]}}


def routes(sshd: CertSshd, policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        sshd.route("db", ssh_certificate_ttl=f"{TTL}s", policy=policy),
        sshd.route("fwd", ssh_allow_port_forwarding=True, allowed_users=[ALICE]),
        sshd.route("wrongkey", ssh_upstream_host_keys=[WRONG_KEY],
                   allow_any_authenticated_user=True),
        # everyone but Bob: for someone not signed in ``not`` of a criterion about the
        # person is unknown, so they sign in first and are decided as themselves
        sshd.route("notbob", policy={"allow": {"not": [{"email": {"is": BOB}}]}}),
    ]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    for name in ("sshd", "ssh", "scp", "sftp", "ssh-keygen"):
        if find_binary(name) is None:
            pytest.fail(f"{name} is missing: apt-get install -y openssh-server openssh-client")
    tmp = tmp_path_factory.mktemp("ssh-native")
    keys = gateway_keys(tmp)
    port, ssh_port, metrics_port = free_port(), free_port(), free_port()
    with cert_sshd(tmp, keys.ca_public) as sshd, \
            oidc_provider(tmp, [callback_uri(port)]) as op:
        config = {**signing_in_config(op, port, routes(sshd, db_policy(sshd))),
                  **keys.settings(ssh_port),
                  # (two levels the gateway makes: both must come out 0700)
                  "ssh_recording_dir": str(tmp / "recordings" / "gateway"),
                  "metrics_address": f"127.0.0.1:{metrics_port}",
                  "audit_log_file": str(tmp / "audit.jsonl")}
        with gateway_daemon(tmp, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            yield Env(tmp, keys, sshd, op, gateway, ssh_port, port, config)


def sign_in(env: Env, user: str, *command: str, login: str = ALICE, key: Path | None = None
            ) -> tuple[subprocess.Popen[bytes], bytes, Browser]:
    return sign_in_ssh(env.argv(user, *command, options=(), key=key), login)


@dataclass
class First:
    returncode: int
    out: bytes
    err: bytes
    browser: Browser


@pytest.fixture(scope="module")
def first(env: Env) -> First:
    """Alice's first connection: it signs in."""
    proc, seen, browser = sign_in(env, f"{env.sshd.user}@db", "echo native; echo $((6 * 7))")
    out, err = proc.communicate(timeout=60)
    return First(proc.returncode, out, seen + err, browser)


def test_first_connection_signs_in_then_the_key_alone_is_enough(env: Env, first: First
                                                                ) -> None:
    """The first ssh shows the sign-in link, waits while the person signs in and
    confirms, then runs the command on the server; the next ssh with the same key
    (BatchMode: no prompt possible) runs without any browser. The server saw a
    certificate for the login user whose key id names the person."""
    assert first.returncode == 0, first.err.decode()
    assert first.out.split() == [b"native", b"42"]
    second = env.ssh(f"{env.sshd.user}@db", "echo again")
    assert second.returncode == 0, second.stderr.decode()
    assert second.stdout == b"again\n"
    log = env.sshd.log()
    assert "ED25519-CERT" in log and f'Accepted certificate ID "{ALICE} session:' in log, log


def test_exit_status_and_stderr_are_relayed(env: Env, first: First) -> None:
    """...and an exec session (no terminal) leaves its command and exit status in the
    recording directory (0600; every directory the gateway made for it 0700)."""
    done = env.ssh(f"{env.sshd.user}@db", "echo out; echo err >&2; exit 7",
                   options=("BatchMode=yes", "LogLevel=ERROR"))
    assert (done.returncode, done.stdout, done.stderr) == (7, b"out\n", b"err\n")

    def recorded() -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in
                (env.tmp / "recordings").rglob("*.exec.json")]

    wait_until(lambda: any(r["command"].endswith("exit 7") for r in recorded()), 10,
               what="the exec record")
    record = next(r for r in recorded() if r["command"].endswith("exit 7"))
    assert (record["exit_status"], record["user"], record["login"], record["route"]) == \
        (7, ALICE, env.sshd.user, "db")
    for path in (env.tmp / "recordings").rglob("*.exec.json"):
        assert path.stat().st_mode & 0o777 == 0o600
    # every directory the gateway made for them is 0700: ssh_recording_dir, its missing
    # parent and the day's (issue 39: all but the innermost came out 0755)
    made = [env.tmp / "recordings",
            *(p for p in (env.tmp / "recordings").rglob("*") if p.is_dir())]
    assert len(made) >= 3
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in made} == \
        {str(p): "0o700" for p in made}


def test_certificate_validity_is_the_route_ttl(env: Env, first: First) -> None:
    """The certificate the server accepted (as the server itself saw it,
    ExposeAuthInfo) is for the login name, valid from a minute ago (clock skew) until
    the route's ssh_certificate_ttl from now, with permit-pty only."""
    now = time.time()
    done = env.ssh(f"{env.sshd.user}@db",
                   "cut -d' ' -f2- \"$SSH_USER_AUTH\" | ssh-keygen -L -f -")
    assert done.returncode == 0, done.stderr.decode()
    text = done.stdout.decode()
    found = re.search(r"Valid: from (\S+) to (\S+)", text)
    assert found, text
    start, end = (datetime.fromisoformat(v).timestamp() for v in found.groups())
    assert end - start == TTL + 60, text
    assert now - 5 <= end - TTL <= now + 5, text  # issued for this very connection
    assert f"Principals: \n                {env.sshd.user}\n" in text, text
    extensions = text.split("Extensions:")[1].split()
    assert extensions == ["permit-pty"], text


def test_scp_of_64_mib_is_byte_exact_both_ways(env: Env, first: First) -> None:
    source = env.tmp / "big.bin"
    with open(source, "wb") as handle:
        handle.write(os.urandom(64 * 1024 * 1024))
    remote = env.tmp / "remote.bin"
    back = env.tmp / "back.bin"
    target = f"{env.sshd.user}@db@127.0.0.1"
    scp = ssh_argv(env.keys.client_key, env.ssh_port, "", options=("BatchMode=yes",),
                   binary="scp")
    up = subprocess.run([*scp, str(source), f"{target}:{remote}"], capture_output=True,
                        timeout=300)
    assert up.returncode == 0, up.stderr.decode()
    down = subprocess.run([*scp, f"{target}:{remote}", str(back)], capture_output=True,
                          timeout=300)
    assert down.returncode == 0, down.stderr.decode()
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert hashlib.sha256(remote.read_bytes()).hexdigest() == digest
    assert hashlib.sha256(back.read_bytes()).hexdigest() == digest
    for path in (source, remote, back):
        path.unlink()


def test_sftp_lists_a_directory(env: Env, first: First) -> None:
    folder = env.tmp / "listing"
    folder.mkdir()
    (folder / "one.txt").write_text("1")
    (folder / "two.txt").write_text("2")
    sftp = ssh_argv(env.keys.client_key, env.ssh_port, "", options=("BatchMode=yes",),
                    binary="sftp")
    done = subprocess.run([*sftp, "-b", "-", f"{env.sshd.user}@db@127.0.0.1"],
                          input=f"ls -1 {folder}\n".encode(), capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    names = sorted(Path(line).name for line in done.stdout.decode().split()
                   if line.endswith(".txt"))
    assert names == ["one.txt", "two.txt"]
    wait_until(lambda: any('"subsystem sftp"' in p.read_text() for p in
                           (env.tmp / "recordings").rglob("*.exec.json")), 10,
               what="the sftp session's record")


def test_pty_shell_window_change_and_a_recording_asciinema_plays(env: Env, first: First
                                                                 ) -> None:
    """A shell with a terminal: the server sees the terminal's size and its change;
    the session's recording (0600, asciicast v2) holds the output and the resize, and
    asciinema reads it."""
    shell = PtyProcess(env.argv(f"{env.sshd.user}@db", options=("BatchMode=yes",
                                                                "RequestTTY=force")),
                       rows=24, columns=80)
    try:
        shell.write(b"stty size; echo marker-$((40 + 2))\n")
        shell.read_until(b"marker-42")
        assert b"24 80" in shell.seen
        shell.resize(30, 100)
        time.sleep(0.5)  # the window-change travels before the next command
        shell.write(b"stty size; echo second-$((40 + 3))\n")
        shell.read_until(b"second-43")
        assert b"30 100" in shell.seen
        shell.write(b"exit\n")
        assert shell.close() == 0
    finally:
        if shell.proc.poll() is None:
            shell.proc.kill()
    casts = sorted((env.tmp / "recordings").rglob("*.cast"), key=os.path.getmtime)
    assert casts, "no recording"
    cast = casts[-1]
    assert oct(cast.stat().st_mode & 0o777) == "0o600"
    lines = cast.read_text().splitlines()
    assert '"version": 2' in lines[0] and '"width": 80' in lines[0]
    assert any('"r", "100x30"' in line for line in lines), lines
    asciinema = shutil.which("asciinema")
    if asciinema is None:
        pytest.fail("asciinema is missing: apt-get install -y asciinema")
    played = PtyProcess([asciinema, "cat", str(cast)])  # it reads keys from /dev/tty
    played.read_until(b"second-43")
    assert b"marker-42" in played.seen
    assert played.close() == 0


def test_denied_login_name_never_reaches_the_server(env: Env, first: First) -> None:
    """The policy allows Alice only as the server's user: another login name is refused
    with one line naming who she is, the route and the login; sshd sees no connection."""
    before = env.sshd.log().count("Connection from")
    done = env.ssh("nobody@db", "true")
    assert done.returncode == 255
    assert (f"signed in as {ALICE}; route db does not allow you to log in as nobody"
            in done.stderr.decode()), done.stderr.decode()
    assert env.sshd.log().count("Connection from") == before


def test_denied_person_never_reaches_the_server(env: Env, first: First) -> None:
    """Bob signs in with his own key; the route is Alice's: refused, server untouched."""
    bob_key = keygen(env.tmp / "keys" / "bob", "bob's laptop")
    before = env.sshd.log().count("Connection from")
    proc, seen, _ = sign_in(env, f"{env.sshd.user}@db", "true", login=BOB, key=bob_key)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 255
    assert f"signed in as {BOB}; route db:" in err.decode(), (seen + err).decode()
    assert env.sshd.log().count("Connection from") == before


def test_no_login_name(env: Env, first: First) -> None:
    """``ssh db@gateway``: the one login db's policy gives Alice (ssh_username is the
    server's user) is used; fwd's policy (allowed_users) names no login, so the refusal
    says how to name one."""
    done = env.ssh("db", "id -un")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == env.sshd.user
    refused = env.ssh("fwd", "true")
    assert refused.returncode == 255
    assert "name the login for route fwd: ssh alice@fwd@HOST" in refused.stderr.decode()


def test_a_not_rule_signs_people_in_then_decides_with_who_they_are(env: Env, first: First
                                                                    ) -> None:
    """``allow: {not: [{email: {is: BOB}}]}`` (issue 39 part 3): a connection with a key
    nobody has signed in with goes to sign-in, never to the server; once signed in, the
    rule is decided with the person: Carol is let in, Bob is refused."""
    carol_key = keygen(env.tmp / "keys" / "carol-notbob", "carol's other laptop")
    before = env.sshd.log().count("Connection from")
    batch = env.ssh(f"{env.sshd.user}@notbob", "true", key=carol_key)  # cannot sign in
    assert batch.returncode == 255, batch.stderr.decode()
    assert env.sshd.log().count("Connection from") == before
    proc, seen, _ = sign_in(env, f"{env.sshd.user}@notbob", "echo carol-in",
                            login="carol@other.test", key=carol_key)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (seen + err).decode()
    assert out == b"carol-in\n"
    bob_key = keygen(env.tmp / "keys" / "bob-notbob", "bob's other laptop")
    proc, seen, _ = sign_in(env, f"{env.sshd.user}@notbob", "true", login=BOB, key=bob_key)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 255
    assert f"signed in as {BOB}; route notbob:" in err.decode(), (seen + err).decode()


def test_local_forward_only_where_the_route_allows_it(env: Env, first: First) -> None:
    """``ssh -W`` (a direct-tcpip channel) reaches the server's own port through the
    route that allows forwarding, and is refused on the route that does not."""
    def forward(route: str) -> subprocess.CompletedProcess[bytes]:
        argv = env.argv(f"{env.sshd.user}@{route}")
        argv[-1:-1] = ["-W", f"127.0.0.1:{env.sshd.port}"]
        return subprocess.run(argv, capture_output=True, timeout=30,
                              stdin=subprocess.DEVNULL)

    allowed = forward("fwd")
    # the forwarded bytes are sshd's banner; ssh ends when stdin (DEVNULL) closes
    assert allowed.stdout.startswith(b"SSH-2.0-OpenSSH"), allowed
    refused = forward("db")
    assert refused.returncode != 0
    assert b"port forwarding is not allowed on route db" in refused.stderr, refused.stderr


def test_agent_forwarding_is_refused(env: Env, first: First) -> None:
    """With an agent to forward, ssh -A asks; the gateway refuses, and the session runs
    without SSH_AUTH_SOCK on the server."""
    agent_sock = env.tmp / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(agent_sock)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(agent_sock.exists, 10, what="ssh-agent socket")
        done = subprocess.run(
            env.argv(f"{env.sshd.user}@db", "echo agent=${SSH_AUTH_SOCK:-none}",
                     options=("BatchMode=yes", "ForwardAgent=yes")),
            capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
            env={**os.environ, "SSH_AUTH_SOCK": str(agent_sock)})
    finally:
        agent.terminate()
        agent.wait(10)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"agent=none\n"
    assert env.gateway.logged("refused auth-agent-req@openssh.com")


def test_wrong_upstream_host_key_is_refused(env: Env, first: First) -> None:
    done = env.ssh(f"{env.sshd.user}@wrongkey", "true")
    assert done.returncode == 255
    assert b"host key is not the one this route trusts" in done.stderr, done.stderr
    event = env.gateway.wait_for_event(
        lambda e: "is not the trusted" in e.get("message", ""), what="host key log")
    assert event["route"] == "wrongkey" and event["expected"].startswith("SHA256:")
    assert event["shown"].startswith("SHA256:") and event["shown"] != event["expected"]


def test_jump_host_mode(env: Env, first: First) -> None:
    """``ssh -J`` (here its ProxyCommand form, so that the jump uses this key too): the
    outer connection names no route, its channel to "db" carries an inner connection
    the gateway terminates with the same key, policy and certificate; a session on the
    outer one is refused with a line saying how to name a route."""
    jump = " ".join(env.argv("alice", options=("BatchMode=yes",)))
    jump = jump.replace(" alice@127.0.0.1", " -W %h:%p alice@127.0.0.1")
    inner = ssh_argv(env.keys.client_key, 22, env.sshd.user, "echo jumped",
                     options=("BatchMode=yes", f"ProxyCommand={jump}"))
    inner[inner.index(f"{env.sshd.user}@127.0.0.1")] = f"{env.sshd.user}@db"
    done = subprocess.run(inner, capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"jumped\n"
    refused = subprocess.run(
        ssh_argv(env.keys.client_key, env.ssh_port, "nobody", "true",
                 options=("BatchMode=yes",)),
        capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode == 255
    assert b"there is no SSH route nobody; name one as LOGIN@ROUTE" in refused.stderr, \
        refused.stderr


def test_sign_in_page_needs_the_person_to_confirm(env: Env, first: First) -> None:
    """Opening a sign-in link binds nothing: the page asks; a POST without the person's
    CSRF token is refused and the connection keeps waiting; an unknown ticket is an
    error page. The person's valid token posted by a page of another origin binds
    nothing either (issue 39: it did); posted from the page itself, as a browser
    does (Sec-Fetch-Site same-origin, its Origin), it admits the connection."""
    key = keygen(env.tmp / "keys" / "carol", "carol's laptop")
    proc = subprocess.Popen(env.argv(f"{env.sshd.user}@db", "true", options=(), key=key),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        seen = read_until(proc.stderr, b"to continue", 60)
        url = seen.split(b"Sign in at ")[1].split()[0].decode()
        browser = first.browser  # Alice, signed in on the authenticate host
        page = browser.request("GET", url)
        assert page.status == 200 and b"Allow this SSH connection?" in page.body
        assert b"SHA256:" in page.body and b"127.0.0.1" in page.body
        forged = browser.request("POST", url, b"csrf=not-the-token")
        assert forged.status == 400
        assert proc.poll() is None  # still waiting: nothing was bound
        unknown = browser.request("GET", url.rsplit("/", 1)[0] + "/unknown-ticket")
        assert unknown.status == 400 and b"invalid or has expired" in unknown.body
        token = page.body.split(b'name="csrf" value="')[1].split(b'"')[0]
        own = f"http://authenticate.localhost:{env.http_port}"
        for foreign in ({"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.test"},
                        {"Sec-Fetch-Site": "same-site",
                         "Origin": f"http://db.localhost:{env.http_port}"},
                        {"Origin": "null"}, {"Sec-Fetch-Site": "none"}):
            refused = browser.request("POST", url, b"csrf=" + token, headers=foreign)
            assert refused.status == 403 and b"from another site" in refused.body, foreign
        # nothing was bound (a bound ticket's page says "SSH connection allowed")
        again = browser.request("GET", url)
        assert b"Allow this SSH connection?" in again.body, again.body
        assert proc.poll() is None  # still waiting
        allowed = browser.request("POST", url, b"csrf=" + token,
                                  headers={"Sec-Fetch-Site": "same-origin", "Origin": own})
        assert allowed.status == 200 and b"SSH connection allowed" in allowed.body
        assert proc.wait(30) == 0  # admitted, ran `true`
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def ssh_metrics(env: Env) -> dict[str, float]:
    """The gateway_ssh_* samples, once no SSH connection is open any more (the gateway
    may see a client leave a moment after the client exited)."""
    import urllib.request

    port = env.config["metrics_address"].rsplit(":", 1)[1]
    values: dict[str, float] = {}

    def read() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        values.clear()
        values.update({line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                       for line in text.splitlines() if line.startswith("gateway_ssh_")})
        return values.get("gateway_ssh_open_connections") == 0

    wait_until(read, 10, what="no open SSH connection")
    return values


def test_metrics(env: Env, first: First) -> None:
    """A login allowed, one denied, and the bytes of the ended connection."""
    allowed = 'gateway_ssh_connections_total{decision="allowed"}'
    denied = 'gateway_ssh_connections_total{decision="denied"}'
    out = 'gateway_ssh_bytes_total{direction="out"}'
    before = ssh_metrics(env)
    assert env.ssh(f"{env.sshd.user}@db", "head -c 100000 /dev/zero").returncode == 0
    assert env.ssh("nobody@db", "true").returncode == 255
    after = ssh_metrics(env)
    assert after[allowed] - before.get(allowed, 0) == 1, (before, after)
    assert after[denied] - before.get(denied, 0) == 1, (before, after)
    assert after[out] - before.get(out, 0) == 100000, (before, after)


def test_audit_stream(env: Env, first: First) -> None:
    """SSH decisions are in the audit stream like HTTP ones: via ssh, the login as
    ssh_user, allow and deny with the rule that decided."""
    assert env.ssh("nobody@db", "true").returncode == 255
    audit = env.tmp / "audit.jsonl"

    def events() -> list[dict[str, Any]]:
        if not audit.exists():
            return []
        return [e for e in map(json.loads, audit.read_text().splitlines())
                if e.get("via") == "ssh"]

    wait_until(lambda: any(e["decision"] == "deny" and e.get("ssh_user") == "nobody"
                           for e in events()), 10, what="the audit event")
    allowed = [e for e in events() if e["decision"] == "allow"]
    assert allowed and allowed[0]["ssh_user"] == env.sshd.user
    assert allowed[0]["email"] == ALICE and allowed[0]["route"] == "db"
    denied = next(e for e in events() if e["decision"] == "deny")
    assert denied["credential"] == "key" and denied["rule"], denied


def open_session(env: Env) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(env.argv(f"{env.sshd.user}@db", "echo started; sleep 60"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    read_until(proc.stdout, b"started", 30)
    return proc


def test_a_policy_reload_that_denies_closes_the_connection(env: Env, first: First) -> None:
    proc = open_session(env)
    try:
        env.gateway.write_config(env.route_config(
            {"allow": {"and": [{"email": {"is": ALICE}}, {"ssh_username": {"is": "other"}}]}}))
        start = time.monotonic()
        _, err = proc.communicate(timeout=15)
        assert time.monotonic() - start < 5
    finally:
        if proc.poll() is None:
            proc.kill()
        env.gateway.write_config(env.written())
    assert b"route db does not allow you to log in as" in err, err
    wait_until(lambda: env.ssh(f"{env.sshd.user}@db", "true").returncode == 0, 15,
               what="the restored policy")


def test_sign_out_closes_an_open_connection(env: Env, first: First) -> None:
    proc = open_session(env)
    try:
        first.browser.sign_out(f"http://authenticate.localhost:{env.http_port}")
        start = time.monotonic()
        _, err = proc.communicate(timeout=15)
        assert time.monotonic() - start < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    assert b"your session has ended" in err, err
    again = env.ssh(f"{env.sshd.user}@db", "true")
    assert again.returncode == 255  # the key's session is gone: sign in again

