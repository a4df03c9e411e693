"""The SSH server's ssh-userauth service on a recording transport: publickey proofs,
the sign-in by keyboard-interactive, refusals, and what a client learns before it is
authenticated (nothing about routes or people)."""

from __future__ import annotations

import struct
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from twisted.conch.ssh import keys
from twisted.conch.ssh.common import NS
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.known_hosts import fingerprint
from gateway.ssh import limits
from gateway.ssh.auth import GatewayUserAuth
from gateway.ssh.user_names import LoginTarget
from tests.support.ssh_fakes import FakeGate, FakeSSH

FAILURE, SUCCESS, BANNER, PK_OK, INFO_REQUEST = 51, 52, 53, 60, 60


def request(user: bytes, method: bytes, rest: bytes = b"",
            service: bytes = b"ssh-connection") -> bytes:
    return NS(user) + NS(service) + NS(method) + rest


def signed(ssh: FakeSSH, key: Any, user: bytes, algorithm: bytes | None = None,
           sign_as: bytes | None = None) -> bytes:
    """A publickey request with a signature, as OpenSSH sends it."""
    conch = keys.Key(key)
    algorithm = algorithm or conch.sshType()
    blob = conch.public().blob()
    data = (NS(ssh.sessionID) + b"\x32" + NS(user) + NS(b"ssh-connection")
            + NS(b"publickey") + b"\x01" + NS(algorithm) + NS(blob))
    signature = conch.sign(data, signatureType=sign_as or algorithm)
    return request(user, b"publickey", b"\x01" + NS(algorithm) + NS(blob) + NS(signature))


class UserAuthTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.ssh = FakeSSH()
        self.gate = FakeGate()
        self.auth = GatewayUserAuth(self.ssh, self.gate)  # type: ignore[arg-type]
        self.key = ed25519.Ed25519PrivateKey.generate()
        self.blob = keys.Key(self.key).public().blob()

    def send(self, payload: bytes, kind: int = 50) -> None:
        self.auth.packetReceived(kind, payload)

    def test_a_key_query_is_answered_pk_ok(self) -> None:
        self.send(request(b"alice@db", b"publickey",
                          b"\x00" + NS(b"ssh-ed25519") + NS(self.blob)))
        self.assertEqual(self.ssh.sent, [(PK_OK, NS(b"ssh-ed25519") + NS(self.blob))])

    def test_bound_key_is_admitted(self) -> None:
        """A key bound to a session: the gate decides, success, the bridge runs."""
        self.gate.bound = "session"
        self.send(signed(self.ssh, self.key, b"alice@db"))
        self.assertEqual(self.gate.admitted,
                         [(LoginTarget("alice", "db"), "session", fingerprint(self.blob))])
        self.assertEqual(self.ssh.kinds(), [SUCCESS])
        self.assertTrue(self.ssh.authenticated)
        self.assertEqual(self.ssh.service, "bridge")

    def test_unbound_key_signs_in_by_keyboard_interactive(self) -> None:
        """Partial success naming keyboard-interactive only, a banner; then the sign-in
        line as the instruction (no prompts), the wait, and the admission."""
        self.send(signed(self.ssh, self.key, b"alice@db"))
        self.assertEqual(self.ssh.sent[0][0], BANNER)
        self.assertEqual(self.ssh.sent[1], (FAILURE, NS(b"keyboard-interactive") + b"\x01"))
        self.gate.confirmed = "new session"
        self.send(request(b"alice@db", b"keyboard-interactive", NS(b"") + NS(b"")))
        kind, payload = self.ssh.sent[2]
        self.assertEqual(kind, INFO_REQUEST)
        self.assertEqual(payload, NS(b"") + NS(
            b"Sign in at https://authenticate.example.com/.gateway/ssh/TICKET to continue\n")
            + NS(b"") + struct.pack(">L", 0))
        self.assertGreater(self.ssh.grace, limits.SIGN_IN_WAIT)
        self.send(struct.pack(">L", 0), kind=61)
        self.assertEqual(self.gate.admitted[0][1], "new session")
        self.assertEqual(self.ssh.kinds()[-1], SUCCESS)

    def test_keyboard_interactive_needs_a_proven_key(self) -> None:
        self.send(request(b"alice@db", b"keyboard-interactive", NS(b"") + NS(b"")))
        self.assertEqual(self.ssh.sent, [(FAILURE, NS(b"publickey") + b"\x00")])
        self.assertEqual(self.gate.asked, [])

    def test_sign_in_not_completed_disconnects(self) -> None:
        self.send(signed(self.ssh, self.key, b"alice@db"))
        self.send(request(b"alice@db", b"keyboard-interactive", NS(b"") + NS(b"")))
        self.send(struct.pack(">L", 0), kind=61)
        assert self.ssh.disconnected is not None
        self.assertIn(b"not completed in time", self.ssh.disconnected[1])

    def test_refusal_is_the_disconnect_message(self) -> None:
        self.gate.bound = "session"
        self.gate.refusal = "signed in as bob@example.com; route db does not allow you"
        self.send(signed(self.ssh, self.key, b"root@db"))
        self.assertEqual(self.ssh.disconnected,
                         (14, b"signed in as bob@example.com; route db does not allow you"))
        self.assertFalse(self.ssh.authenticated)

    def test_bad_signature_and_bad_user_name_look_the_same(self) -> None:
        """A wrong signature, a malformed user name and an unknown method all get the
        same plain failure: nothing says which part was wrong."""
        other = ed25519.Ed25519PrivateKey.generate()
        forged = signed(self.ssh, other, b"alice@db").replace(
            NS(keys.Key(other).public().blob()), NS(self.blob))
        self.send(forged)
        self.gate.bound = "session"
        self.send(signed(self.ssh, self.key, b"Alice!@@db"))
        self.send(request(b"alice@db", b"password", b"\x00" + NS(b"secret")))
        self.assertEqual(self.ssh.sent, [(FAILURE, NS(b"publickey") + b"\x00")] * 3)
        self.assertEqual(self.gate.admitted, [])

    def test_sha1_rsa_signatures_are_refused(self) -> None:
        """ssh-rsa (SHA-1) is refused; the same RSA key signing rsa-sha2-256 passes."""
        self.gate.bound = "session"
        key = rsa.generate_private_key(65537, 2048)
        self.send(signed(self.ssh, key, b"alice@db", b"ssh-rsa"))
        self.assertEqual(self.ssh.kinds(), [FAILURE])
        self.send(signed(self.ssh, key, b"alice@db", b"rsa-sha2-256"))
        self.assertEqual(self.ssh.kinds(), [FAILURE, SUCCESS])

    def test_signature_algorithm_must_match_the_request(self) -> None:
        self.gate.bound = "session"
        key = rsa.generate_private_key(65537, 2048)
        self.send(signed(self.ssh, key, b"alice@db", b"rsa-sha2-512", sign_as=b"ssh-rsa"))
        self.assertEqual(self.ssh.kinds(), [FAILURE])

    def test_ecdsa_keys_work(self) -> None:
        self.gate.bound = "session"
        self.send(signed(self.ssh, ec.generate_private_key(ec.SECP256R1()), b"alice@db"))
        self.assertEqual(self.ssh.kinds(), [SUCCESS])

    def test_too_many_failures_disconnect(self) -> None:
        for _ in range(limits.AUTH_ATTEMPTS + 1):
            self.send(request(b"alice@db", b"password", b"\x00" + NS(b"x")))
        assert self.ssh.disconnected is not None
        self.assertIn(b"too many", self.ssh.disconnected[1])

    def test_key_queries_and_key_sizes_are_bounded(self) -> None:
        query = request(b"alice@db", b"publickey",
                        b"\x00" + NS(b"ssh-ed25519") + NS(self.blob))
        for _ in range(limits.KEY_QUERIES):
            self.send(query)
        self.assertIsNone(self.ssh.disconnected)
        self.send(query)
        assert self.ssh.disconnected is not None
        self.assertIn(b"too many keys", self.ssh.disconnected[1])
        other = FakeSSH()
        auth = GatewayUserAuth(other, self.gate)  # type: ignore[arg-type]
        huge = NS(b"ssh-rsa") + NS(b"\x01\x00\x01") + NS(b"\x00" + b"\xff" * 2048)
        auth.packetReceived(50, request(b"alice@db", b"publickey",
                                        b"\x00" + NS(b"rsa-sha2-256") + NS(huge)))
        self.assertEqual(other.kinds(), [FAILURE])

    def test_only_ssh_connection_is_served(self) -> None:
        self.send(request(b"alice@db", b"none", service=b"ssh-other"))
        assert self.ssh.disconnected is not None
        self.assertEqual(self.ssh.disconnected[0], 7)

    def test_garbage_is_a_protocol_error(self) -> None:
        self.send(b"\x00\x00\xff\xff")
        assert self.ssh.disconnected is not None
        self.assertEqual(self.ssh.disconnected[0], 2)


class AbandonedTests(SynchronousTestCase):
    def test_a_person_who_left_meanwhile_gets_no_bridge(self) -> None:
        """The connection closed while the gate reached the server: no success is sent
        and the server's side is closed again."""
        ssh = FakeSSH()

        class Bridge:
            abandoned = False

            def abandon(self) -> None:
                self.abandoned = True

        bridge = Bridge()

        class LeavingGate(FakeGate):
            async def admit(self, ssh: Any, target: LoginTarget, session: Any,
                            key_fingerprint: str) -> Any:
                ssh.lost = True
                return bridge

        auth = GatewayUserAuth(ssh, LeavingGate(bound="session"))  # type: ignore[arg-type]
        auth.packetReceived(50, signed(ssh, ed25519.Ed25519PrivateKey.generate(), b"a@db"))
        self.assertEqual(ssh.sent, [])
        self.assertTrue(bridge.abandoned)
        self.assertIsNone(ssh.service)
