"""The pure parts of native SSH: user names, the decision and its words, certificates,
recordings; and the server factory's limits on a memory reactor."""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.conch.ssh import keys
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.caller import Caller, caller_of
from gateway.authorize.ssh_logins import decide_login, no_login_message
from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.routes import parse_policy
from gateway.sessions.model import Session
from gateway.ssh import limits
from gateway.ssh.asciicast import Cast
from gateway.ssh.certs import issue
from gateway.ssh.recorder import Recorder, Recording
from gateway.ssh.transport import GatewayFactory, GatewayServerTransport
from gateway.ssh.user_names import BadUserName, LoginTarget, parse_user

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


class NameTests(SynchronousTestCase):
    def test_login_and_route(self) -> None:
        self.assertEqual(parse_user(b"alice@db"), LoginTarget("alice", "db"))
        self.assertEqual(parse_user(b"db"), LoginTarget("", "db"))
        self.assertEqual(parse_user(b"svc_1.x-y@DB.internal"),
                         LoginTarget("svc_1.x-y", "db.internal"))

    def test_refused(self) -> None:
        for raw in (b"", b"@db", b"alice@", b"al ice@db", b"alice@db@", b"-x@db",
                    b"alice@d_b", "é@db".encode(), b"a" * 300, b"alice@-db"):
            with self.assertRaises(BadUserName, msg=raw):
                parse_user(raw)


def route(policy: dict[str, object]) -> object:
    problems = Problems()
    routes = parse_policy([{"from": "ssh://db", "to": "ssh://127.0.0.1",
                            "ssh_upstream_host_keys": [KEY], **policy}],
                          Reader(tempfile.gettempdir()), problems, 30.0)
    assert not problems.errors, problems.errors
    return routes[0]


def session(email: str = "alice@example.com", **more: object) -> Session:
    return Session(id="s1", user_id="u1", email=email, issued_at=0.0,
                   expires_at=time.time() + 3600, **more)  # type: ignore[arg-type]


def caller(s: Session) -> Caller:
    return caller_of(s, allow_unverified_email=True, groups_available=False)


def person(email: str = "alice@example.com", **more: object) -> Caller:
    """The caller ``session`` is (decisions take a caller, not a session)."""
    return caller(session(email, **more))


class DecisionTests(SynchronousTestCase):
    def test_login_name_rules(self) -> None:
        r = route({"policy": {"allow": {"and": [{"domain": {"is": "example.com"}},
                                                {"ssh_username_matches_email": True}]}}})
        allowed = decide_login(r, "db", "alice", person(), "192.0.2.1", time.time())  # type: ignore[arg-type]
        self.assertTrue(allowed.allowed, allowed)
        denied = decide_login(r, "db", "root", person(), "192.0.2.1", time.time())  # type: ignore[arg-type]
        self.assertFalse(denied.allowed)
        self.assertEqual(denied.message, "signed in as alice@example.com; route db does not "
                                         "allow you to log in as root")

    def test_allow_fields_and_other_refusals(self) -> None:
        r = route({"allowed_users": ["bob@example.com"]})
        denied = decide_login(r, "db", "root", person(), "192.0.2.1", time.time())  # type: ignore[arg-type]
        self.assertFalse(denied.allowed)
        self.assertTrue(denied.message.startswith("signed in as alice@example.com; route db: "))
        self.assertTrue(decide_login(r, "db", "root", person("bob@example.com"),  # type: ignore[arg-type]
                                     "192.0.2.1", time.time()).allowed)

    def test_claim_rule(self) -> None:
        from types import MappingProxyType

        r = route({"policy": {"allow": {"and": [{"ssh_username_matches_claim": "logins"}]}}})
        who = person(claims=MappingProxyType({"logins": ("deploy", "alice")}))
        self.assertTrue(decide_login(r, "db", "deploy", who, "", time.time()).allowed)  # type: ignore[arg-type]
        self.assertFalse(decide_login(r, "db", "root", who, "", time.time()).allowed)  # type: ignore[arg-type]

    def test_ended_session(self) -> None:
        r = route({"allow_any_authenticated_user": True})
        ended = Session(id="s", user_id="u", email="a@example.com", issued_at=0.0,
                        expires_at=1.0)
        result = decide_login(r, "db", "root", caller(ended), "", time.time())  # type: ignore[arg-type]
        self.assertFalse(result.allowed)
        self.assertIn("session has ended", result.message)

    def test_default_login_from_the_policy(self) -> None:
        from types import MappingProxyType

        from gateway.authorize.ssh_logins import default_login, policy_logins

        r = route({"policy": {"allow": {"or": [
            {"ssh_username_matches_email": True},
            {"and": [{"groups": {"has": "admins"}}, {"ssh_username": {"in": ["root", "deploy"]}}]},
            {"ssh_username_matches_claim": "logins"}]}}})
        alice = person(claims=MappingProxyType({"logins": ("svc",)}))
        self.assertEqual(policy_logins(r, alice), ["alice", "root", "deploy", "svc"])  # type: ignore[arg-type]
        # alice is allowed as alice and svc: two, so she must choose
        login, how = default_login(r, "db", alice, "", time.time())  # type: ignore[arg-type]
        self.assertEqual(login, "")
        self.assertEqual(how, "name the login for route db: ssh alice@db@HOST or "
                              "ssh svc@db@HOST")
        one = route({"policy": {"allow": {"and": [{"ssh_username": {"is": "deploy"}}]}}})
        self.assertEqual(default_login(one, "db", alice, "", time.time()), ("deploy", ""))  # type: ignore[arg-type]
        legacy = route({"allow_any_authenticated_user": True})
        self.assertEqual(policy_logins(legacy, alice), [])  # type: ignore[arg-type]
        self.assertEqual(default_login(legacy, "db", alice, "", time.time())[0], "")  # type: ignore[arg-type]

    def test_no_login_message(self) -> None:
        self.assertEqual(no_login_message("db", "alice@example.com"),
                         "name the login for route db: ssh alice@db@HOST "
                         "(or ssh -l alice@db HOST)")


class CertificateTests(SynchronousTestCase):
    def test_certificate_fields(self) -> None:
        ca = ed25519.Ed25519PrivateKey.generate()
        issued = issue(ca, "deploy", "alice@example.com session:abc", 300, 1_000_000.0)
        from cryptography.hazmat.primitives.serialization import load_ssh_public_identity

        cert = load_ssh_public_identity(
            b"ssh-ed25519-cert-v01@openssh.com " + __import__("base64").b64encode(
                issued.certificate))
        assert not isinstance(cert, ed25519.Ed25519PublicKey)
        cert.verify_cert_signature()  # type: ignore[union-attr]
        self.assertEqual(cert.valid_principals, [b"deploy"])  # type: ignore[union-attr]
        self.assertEqual((cert.valid_after, cert.valid_before),  # type: ignore[union-attr]
                         (1_000_000 - 60, 1_000_300))
        self.assertEqual(cert.key_id, b"alice@example.com session:abc")  # type: ignore[union-attr]
        self.assertEqual(cert.extensions, {b"permit-pty": b""})  # type: ignore[union-attr]
        self.assertEqual(cert.critical_options, {})  # type: ignore[union-attr]
        self.assertEqual(cert.serial, issued.serial)  # type: ignore[union-attr]
        self.assertEqual(cert.public_key().public_bytes(  # type: ignore[union-attr]
            serialization.Encoding.Raw, serialization.PublicFormat.Raw),
            issued.key.public_key().public_bytes(serialization.Encoding.Raw,
                                                 serialization.PublicFormat.Raw))
        forwarding = issue(ca, "deploy", "k", 60, 1000.0, port_forwarding=True)
        self.assertNotEqual(forwarding.certificate, issued.certificate)


class RecordingTests(SynchronousTestCase):
    def test_asciicast_v2(self) -> None:
        directory = tempfile.mkdtemp(prefix="ssh-rec-")
        path = os.path.join(directory, "2026-01-01", "c-0.cast")
        recorder = Recorder(MemoryReactorClock(), threaded=False)
        failures: list[str] = []
        rec = Recording(recorder.open(path, failures.append),
                        Cast(80, 24, "xterm", 1000.0, "root@db shell", record_input=False))
        rec.output("héllo".encode()[:2], 1000.5)  # a character split across two reads
        rec.output("héllo".encode()[2:], 1001.0)
        rec.input(b"secret\n", 1001.2)
        rec.resize(100, 30, 1002.0)
        rec.close()
        recorder.drain()
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(path, encoding="utf-8") as handle:
            lines = [json.loads(line) for line in handle]
        self.assertEqual(lines[0]["version"], 2)
        self.assertEqual((lines[0]["width"], lines[0]["height"]), (80, 24))
        self.assertEqual(lines[1:], [[0.5, "o", "h"], [1.0, "o", "éllo"], [2.0, "r", "100x30"]])
        self.assertEqual(failures, [])
        again = recorder.open(path, failures.append)  # never overwritten
        recorder.drain()
        self.assertEqual(len(failures), 1)
        self.assertIn("File exists", failures[0])
        self.assertIs(self.successResultOf(again.opened), False)


class FactoryTests(SynchronousTestCase):
    def make(self) -> tuple[GatewayFactory, MemoryReactorClock]:
        reactor = MemoryReactorClock()
        host = keys.Key(ed25519.Ed25519PrivateKey.generate())
        return GatewayFactory(reactor, [host], lambda t: None), reactor

    def test_unauthenticated_connections_per_address_are_capped(self) -> None:
        factory, _ = self.make()
        addr = IPv4Address("TCP", "192.0.2.9", 1234)
        built = [factory.buildProtocol(addr) for _ in range(limits.UNAUTHENTICATED_PER_ADDRESS)]
        self.assertNotIn(None, built)
        self.assertIsNone(factory.buildProtocol(addr))
        self.assertIsNotNone(factory.buildProtocol(IPv4Address("TCP", "192.0.2.10", 1)))
        proto = built[0]
        assert proto is not None
        proto.makeConnection(StringTransport(peerAddress=addr))
        proto.mark_authenticated()  # an authenticated one no longer counts
        self.assertIsNotNone(factory.buildProtocol(addr))

    def test_login_grace_and_current_algorithms_only(self) -> None:
        factory, reactor = self.make()
        addr = IPv4Address("TCP", "192.0.2.9", 1234)
        proto = factory.buildProtocol(addr)
        assert isinstance(proto, GatewayServerTransport)
        wire = StringTransport(peerAddress=addr)
        proto.makeConnection(wire)
        hello = wire.value()
        self.assertTrue(hello.startswith(b"SSH-2.0-gateway\r\n"), hello)
        for weak in (b"cbc", b"hmac-sha1", b"group14-sha1", b"group1", b"ssh-rsa,", b"zlib"):
            self.assertNotIn(weak, hello)
        self.assertEqual(proto.supportedPublicKeys, [b"ssh-ed25519"])
        reactor.advance(limits.LOGIN_GRACE + 1)
        self.assertTrue(wire.disconnecting)
        self.assertEqual(factory.unauthenticated, {"192.0.2.9": 1})
        proto.connectionLost(None)
        self.assertEqual(factory.unauthenticated, {})

    def test_preauth_buffer_bound(self) -> None:
        factory, _ = self.make()
        proto = factory.buildProtocol(IPv4Address("TCP", "192.0.2.9", 1))
        assert proto is not None
        wire = StringTransport()
        proto.makeConnection(wire)
        proto.dataReceived(b"SSH-2.0-x\r\n")
        proto.dataReceived(b"\x00" * (limits.PREAUTH_BUFFER + 1))
        self.assertTrue(wire.disconnecting)


class LoginTests(SynchronousTestCase):
    def test_inner_connection_of_a_jump_names_only_the_login(self) -> None:
        from gateway.ssh.user_names import parse_login

        self.assertEqual(parse_login(b"root", "db"), LoginTarget("root", "db"))
        for raw in (b"root@db", b"", b"ro ot", "é".encode()):
            with self.assertRaises(BadUserName):
                parse_login(raw, "db")
