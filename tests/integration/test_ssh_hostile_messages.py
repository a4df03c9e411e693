"""Hostile SSH messages against the real daemon (issue 39), with the raw test client
(``tests/support/ssh_raw.py``) signed in as a person whose key is bound, a real OpenSSH
``sshd`` as the route's server:

- every channel message (data, extended data, window adjust, EOF, close, request, an
  open confirmation or failure, a request's success or failure) for a channel never
  opened and for one already closed is answered with SSH_DISCONNECT_PROTOCOL_ERROR and
  one info line, never Conch's KeyError logged at critical level with a traceback;
- a server whose host key the route does not trust is told "host key not accepted"
  (sshd logs the reason it receives), not the text of Twisted's internal Failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from twisted.conch.ssh import keys
from twisted.conch.ssh.transport import DISCONNECT_PROTOCOL_ERROR

from tests.support import ssh_raw as raw
from tests.support.daemon import Daemon, gateway_daemon
from tests.support.peers import find_binary, oidc_provider
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import (
    CertSshd,
    GatewayKeys,
    cert_sshd,
    gateway_keys,
    sign_in_ssh,
    ssh_argv,
)
from tests.support.tcp_client import callback_uri, signing_in_config

pytestmark = pytest.mark.integration
ALICE = "alice@example.test"
WRONG_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
DISCONNECTED = "disconnected (protocol error)"


@dataclass
class Env:
    keys: GatewayKeys
    sshd: CertSshd
    gateway: Daemon
    ssh_port: int
    client_key: keys.Key

    def raw(self) -> raw.RawSSH:
        client = raw.RawSSH(self.ssh_port)
        client.authenticate(f"{self.sshd.user}@db".encode(), self.client_key)
        return client


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    for name in ("sshd", "ssh", "ssh-keygen"):
        if find_binary(name) is None:
            pytest.fail(f"{name} is missing: apt-get install -y openssh-server openssh-client")
    tmp = tmp_path_factory.mktemp("ssh-hostile")
    gw_keys = gateway_keys(tmp)
    port, ssh_port = free_port(), free_port()
    with cert_sshd(tmp, gw_keys.ca_public) as sshd, \
            oidc_provider(tmp, [callback_uri(port)]) as op:
        routes = [sshd.route("db", allowed_users=[ALICE]),
                  sshd.route("wrongkey", ssh_upstream_host_keys=[WRONG_KEY],
                             allowed_users=[ALICE])]
        config = {**signing_in_config(op, port, routes), **gw_keys.settings(ssh_port)}
        with gateway_daemon(tmp, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            # alice signs in once with OpenSSH: her key is bound from then on
            proc, _, _ = sign_in_ssh(ssh_argv(gw_keys.client_key, ssh_port,
                                              f"{sshd.user}@db", "true"), ALICE)
            assert proc.wait(60) == 0
            yield Env(gw_keys, sshd, gateway, ssh_port,
                      keys.Key.fromFile(str(gw_keys.client_key)))


def protocol_error_lines(gateway: Daemon) -> list[dict[str, Any]]:
    return [e for e in gateway.log_events() if DISCONNECTED in e.get("message", "")]


def assert_no_traceback(gateway: Daemon) -> None:
    text = gateway.process.log_text()
    assert "Traceback" not in text and "Unhandled" not in text, text[-3000:]
    assert not [e for e in gateway.log_events() if e.get("level") == "critical"]


@pytest.mark.parametrize("state", ["unknown", "closed"])
@pytest.mark.parametrize("kind", list(raw.CHANNEL_MESSAGES))
def test_channel_message_for_a_channel_that_is_not_open(env: Env, kind: str, state: str
                                                        ) -> None:
    before = len(protocol_error_lines(env.gateway))
    client = env.raw()
    try:
        channel = 77
        if state == "closed":
            channel = client.open_session(sender=3)
            client.send(raw.CHANNEL_CLOSE, channel.to_bytes(4, "big"))
            client.expect(raw.CHANNEL_CLOSE)  # the gateway's: closed both ways
        number, payload = raw.CHANNEL_MESSAGES[kind](channel)
        client.send(number, payload)
        code, reason = client.disconnected()
    finally:
        client.close()
    assert code == DISCONNECT_PROTOCOL_ERROR, reason
    assert reason.startswith(b"protocol error: a CHANNEL_"), reason
    assert f"for channel {channel}, which is not open".encode() in reason, reason
    wait_until(lambda: len(protocol_error_lines(env.gateway)) > before, 10,
               what="the protocol error line")
    time.sleep(0.2)  # (a second line, if any, is written in the same turn)
    lines = protocol_error_lines(env.gateway)[before:]
    assert len(lines) == 1, lines
    assert lines[0]["level"] == "info" and lines[0]["route"] == "db", lines[0]
    assert_no_traceback(env.gateway)


def test_refused_host_key_gets_a_fixed_reason(env: Env) -> None:
    """sshd logs the reason the gateway sends it; before, that was ``bad host key
    [ecdh] [Failure instance: Traceback ...: host key mismatch]``."""
    client = raw.RawSSH(env.ssh_port)
    try:
        client.send(raw.SERVICE_REQUEST, raw.NS(b"ssh-userauth"))
        client.expect(raw.SERVICE_ACCEPT)
        client.send(raw.USERAUTH_REQUEST, raw.publickey(
            f"{env.sshd.user}@wrongkey".encode(), env.client_key, client.client.session_id))
        _, reason = client.disconnected()
    finally:
        client.close()
    assert b"host key is not the one this route trusts" in reason, reason
    # (sshd's other lines of the kind: the connections of the module that closed)
    def refused() -> list[str]:
        return [x for x in env.sshd.log().splitlines()
                if "Received disconnect" in x and ":9: " in x]  # HOST_KEY_NOT_VERIFIABLE

    wait_until(lambda: bool(refused()), 10, what="sshd's line")
    assert [x.split(":9: ", 1)[1].removesuffix(" [preauth]") for x in refused()] == \
        ["host key not accepted"], refused()
    assert "Failure" not in env.sshd.log() and "mismatch" not in env.sshd.log()
    assert_no_traceback(env.gateway)
