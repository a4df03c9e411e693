"""Upstream host certificates (issue 31, ``ssh_upstream_host_ca``): the checks of
``gateway.ssh.host_cert`` on certificates cryptography signs, the algorithms the
gateway's client offers, and the key exchange of ``twisted_ext.ssh_hostcert`` between
the gateway's client and Conch's server showing a certificate, over memory transports
(the route settings: ``test_ssh_host_ca_settings``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import ssh
from twisted.conch.ssh import factory, keys
from twisted.conch.ssh.common import NS
from twisted.internet.defer import Deferred
from twisted.internet.testing import StringTransport
from twisted.logger import LogEvent, LogLevel, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.known_hosts import (
    HostKey,
    fingerprint,
)
from gateway.config.ssh import Revocations
from gateway.config.ssh_krl import CertificateRevocations, Krl
from gateway.ssh import algorithms
from gateway.ssh.host_cert import (
    NOT_YET_VALID_SKEW,
    CertificateRefused,
    ca_signature_type,
    check_host_certificate,
)
from gateway.ssh.upstream import (
    CERTIFICATE_HOST_KEYS,
    CLIENT_KEY_EXCHANGES,
    CertificateAuth,
    UpstreamConnection,
    UpstreamFailed,
    UpstreamTransport,
    host_key_algorithms,
    pinned_check,
)
from tests.support.ssh_host_certs import (
    ED_CERT,
    HOST,
    NOW,
    blob_of,
    certificate,
    resigned_sha1,
    rsa_key,
)


class HostCertificateTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.ca = ed25519.Ed25519PrivateKey.generate()
        self.host_key = ed25519.Ed25519PrivateKey.generate()

    def refused(self, blob: bytes, algorithm: bytes = ED_CERT, host: str = HOST,
                now: float = NOW) -> str:
        with self.assertRaises(CertificateRefused) as caught:
            check_host_certificate(blob, algorithm, host, now)
        return str(caught.exception)

    def test_a_good_certificate(self) -> None:
        """Its CA's blob (for the route to find), the certified key's blob (which signs
        the key exchange), its key id, serial and hosts; the host is matched without
        case."""
        cert = check_host_certificate(certificate(self.ca, self.host_key), ED_CERT,
                                      HOST.upper(), NOW)
        self.assertEqual(cert.ca_blob, blob_of(self.ca))
        self.assertEqual(cert.key_blob, blob_of(self.host_key))
        self.assertEqual((cert.key_id, cert.serial, cert.principals),
                         ("web host", 7, (HOST,)))
        self.assertIn("key id 'web host', serial 7, CA SHA256:", cert.identity())

    def test_each_family(self) -> None:
        """ECDSA and RSA keys under ECDSA and RSA CAs; the RSA certificate algorithms
        carry ssh-rsa certificate blobs."""
        p256 = ec.generate_private_key(ec.SECP256R1())
        for ca, key, algorithm in (
                (ec.generate_private_key(ec.SECP384R1()), p256,
                 b"ecdsa-sha2-nistp256-cert-v01@openssh.com"),
                (rsa_key(), rsa_key(), b"rsa-sha2-512-cert-v01@openssh.com"),
                (self.ca, rsa_key(), b"rsa-sha2-256-cert-v01@openssh.com")):
            cert = check_host_certificate(certificate(ca, key), algorithm, HOST, NOW)
            self.assertEqual(cert.key_blob, blob_of(key))

    def test_validity(self) -> None:
        """Up to NOT_YET_VALID_SKEW early is accepted (a signer's clock ahead of ours);
        after valid_before nothing is."""
        blob = certificate(self.ca, self.host_key)
        check_host_certificate(blob, ED_CERT, HOST, NOW - 60 - NOT_YET_VALID_SKEW)
        self.assertIn("not valid before", self.refused(blob, now=NOW - 61 - NOT_YET_VALID_SKEW))
        check_host_certificate(blob, ED_CERT, HOST, NOW + 3599)
        self.assertIn("expired at 2027-01-15T09:00:00Z (key id 'web host', serial 7, CA "
                      "SHA256:", self.refused(blob, now=NOW + 3600))

    def test_hosts(self) -> None:
        """One of its principals must be the route's host; a certificate naming no host
        (OpenSSH: any host) is refused."""
        self.assertIn("it is not for other.example.test (its hosts: db.example.test)",
                      self.refused(certificate(self.ca, self.host_key),
                                   host="other.example.test"))
        self.assertIn("names no host",
                      self.refused(certificate(self.ca, self.host_key, principals=())))
        many = tuple(f"h{i}".encode() for i in range(20))
        self.assertIn("h7, ...)", self.refused(certificate(self.ca, self.host_key,
                                                           principals=many)))
        check_host_certificate(certificate(self.ca, self.host_key, principals=(b"::1",)),
                               ED_CERT, "[::1]", NOW)

    def test_what_is_not_a_host_certificate(self) -> None:
        self.assertIn("a user certificate", self.refused(certificate(
            self.ca, self.host_key, kind=ssh.SSHCertificateType.USER)))
        self.assertIn("unknown critical option(s) force-command", self.refused(certificate(
            self.ca, self.host_key, critical={b"force-command": b"true"})))
        blob = certificate(self.ca, self.host_key)
        self.assertIn("is not a certificate algorithm", self.refused(blob, b"ssh-ed25519"))
        self.assertIn("the server showed ssh-ed25519-cert-v01@openssh.com for "
                      "ecdsa-sha2-nistp256-cert-v01@openssh.com",
                      self.refused(blob, b"ecdsa-sha2-nistp256-cert-v01@openssh.com"))
        self.assertIn("the server showed ssh-ed25519 for", self.refused(blob_of(self.ca)))
        for garbage in (b"", b"\x00\x00\x00\x20" + ED_CERT, blob[:-10], blob + b"x"):
            self.refused(garbage)

    def test_signatures(self) -> None:
        """A CA signature that does not verify; an RSA CA's SHA-1 signature; RSA keys
        under 2048 bits."""
        blob = bytearray(certificate(self.ca, self.host_key))
        blob[-5] ^= 1
        self.assertIn("its CA signature does not verify", self.refused(bytes(blob)))
        ca = rsa_key()
        good = certificate(ca, self.host_key)
        self.assertEqual(ca_signature_type(good, blob_of(ca)), b"rsa-sha2-512")
        sha1 = resigned_sha1(good, ca)
        self.assertEqual(ca_signature_type(sha1, blob_of(ca)), b"ssh-rsa")
        self.assertIn("its CA signed with ssh-rsa", self.refused(sha1))
        self.assertEqual(ca_signature_type(good, blob_of(self.ca)), b"")
        self.assertEqual(ca_signature_type(good + b"\x00", blob_of(ca)), b"")
        self.assertIn("an RSA key of 1024 bits", self.refused(
            certificate(rsa_key(1024), self.host_key)))


class OfferedAlgorithmsTests(SynchronousTestCase):
    def test_host_key_algorithms(self) -> None:
        """Certificate algorithms first when the route has a CA; then the pinned keys'
        own algorithms, or every current one (so that a server without a certificate
        is refused with its key named, not for lack of a common algorithm)."""
        ca = HostKey("ssh-ed25519", b"ca", authority=True)
        pinned = HostKey("ecdsa-sha2-nistp256", b"key")
        self.assertEqual(host_key_algorithms((ca,)),
                         CERTIFICATE_HOST_KEYS + algorithms.SIGNATURES)
        self.assertEqual(host_key_algorithms((ca, pinned)),
                         [*CERTIFICATE_HOST_KEYS, b"ecdsa-sha2-nistp256"])
        self.assertEqual(host_key_algorithms(()), algorithms.SIGNATURES)
        self.assertEqual(CERTIFICATE_HOST_KEYS[0], ED_CERT)
        self.assertNotIn(b"ssh-rsa-cert-v01@openssh.com", CERTIFICATE_HOST_KEYS)

    def test_client_key_exchanges_are_the_ones_conchs_client_does(self) -> None:
        """ML-KEM hybrids are the server's only: Conch's client does not implement them,
        and an OpenSSH 9.9+ server would pick one first."""
        self.assertNotIn(b"mlkem768x25519-sha256", CLIENT_KEY_EXCHANGES)
        self.assertEqual(CLIENT_KEY_EXCHANGES[0], b"curve25519-sha256")
        self.assertEqual(UpstreamTransport.supportedKeyExchanges, CLIENT_KEY_EXCHANGES)


class ShownKey:
    """What Conch's server needs of a host key: its blob and its signatures; here a
    certificate's blob over another key's signatures."""

    def __init__(self, algorithm: bytes, blob: bytes, signer: Any, signature_type: bytes
                 ) -> None:
        self.algorithm, self.shown, self.signer = algorithm, blob, signer
        self.signature_type = signature_type

    def supportedSignatureAlgorithms(self) -> list[bytes]:
        return [self.algorithm]

    def blob(self) -> bytes:
        return self.shown

    def sign(self, data: bytes, signatureType: bytes | None = None) -> bytes:
        signed: bytes = keys.Key(self.signer).sign(data, signatureType=self.signature_type)
        return signed


class Client(UpstreamTransport):
    secured = False
    disconnected = b""

    def connectionSecure(self) -> None:
        self.secured = True

    def sendDisconnect(self, reason: int, desc: bytes) -> None:
        self.disconnected = desc
        base: Any = super()
        base.sendDisconnect(reason, desc)


class KeyExchangeTests(SynchronousTestCase):
    """The gateway's client against Conch's server, bytes moved between two memory
    transports until both are quiet."""

    def setUp(self) -> None:
        self.ca = ed25519.Ed25519PrivateKey.generate()
        self.host_key = ed25519.Ed25519PrivateKey.generate()
        self.asked: list[bytes] = []
        self.events: list[LogEvent] = []
        globalLogPublisher.addObserver(self.events.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.events.append)

    def exchange(self, shown: ShownKey, trusted: tuple[bytes, ...],
                 offered: list[bytes] | None = None, keys: tuple[bytes, ...] = (),
                 revoked: frozenset[bytes] = frozenset(), krl: Krl | None = None
                 ) -> Client:
        """The gateway's client against Conch's server showing ``shown``, on a route
        whose CAs are ``trusted``, whose plain host keys are ``keys`` and whose
        ``@revoked`` keys are ``revoked``."""
        server_factory = factory.SSHFactory()
        server_factory.publicKeys = {shown.algorithm: shown}  # type: ignore[dict-item]
        server_factory.privateKeys = {shown.algorithm: shown}  # type: ignore[dict-item]
        server_factory.primes = {}
        server = server_factory.buildProtocol(None)
        check = pinned_check((*(HostKey("ssh-ed25519", b, True) for b in trusted),
                              *(HostKey("ssh-ed25519", b, False) for b in keys)))

        def asking(blob: bytes, as_authority: bool) -> bool:
            self.asked.append(blob)
            return check(blob, as_authority)

        conn = UpstreamConnection(Deferred())
        client = Client(asking, offered or [shown.algorithm],
                        CertificateAuth("root", None, conn),  # type: ignore[arg-type]
                        Deferred(), HOST, lambda: NOW, Revocations(revoked, krl), "db")
        wires = (StringTransport(), StringTransport())
        client.makeConnection(wires[0])
        server.makeConnection(wires[1])
        pairs: list[tuple[StringTransport, Callable[[bytes], None]]] = [
            (wires[0], server.dataReceived), (wires[1], client.dataReceived)]
        for _ in range(20):
            moved = False
            for wire, receive in pairs:
                data = wire.value()
                wire.clear()
                if data:
                    moved = True
                    receive(data)
            if not moved:
                break
        return client

    def test_a_certificate_signs_the_exchange_with_its_key(self) -> None:
        blob = certificate(self.ca, self.host_key)
        client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"),
                               (blob_of(self.ca),))
        self.assertTrue(client.secured)
        self.assertEqual(self.asked, [blob_of(self.ca)])  # the route is asked of the CA

    def test_rsa_under_the_negotiated_signature(self) -> None:
        key = rsa_key()
        blob = certificate(self.ca, key)
        algorithm = b"rsa-sha2-512-cert-v01@openssh.com"
        client = self.exchange(ShownKey(algorithm, blob, key, b"rsa-sha2-512"),
                               (blob_of(self.ca),))
        self.assertTrue(client.secured)
        client = self.exchange(ShownKey(algorithm, blob, key, b"rsa-sha2-256"),
                               (blob_of(self.ca),))
        self.assertEqual((client.secured, client.disconnected), (False, b"bad signature"))

    def test_an_exchange_signed_by_another_key_is_refused(self) -> None:
        """A certificate copied from the real server does not let another server in: the
        exchange must be signed by the key it certifies."""
        blob = certificate(self.ca, self.host_key)
        other = ed25519.Ed25519PrivateKey.generate()
        client = self.exchange(ShownKey(ED_CERT, blob, other, b"ssh-ed25519"),
                               (blob_of(self.ca),))
        self.assertEqual((client.secured, client.disconnected), (False, b"bad signature"))

    def test_refusals_before_the_signature(self) -> None:
        blob = certificate(self.ca, self.host_key)
        client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"),
                               (b"another CA",))
        self.assertEqual((client.secured, client.disconnected), (False, b"bad host key"))
        self.assertIn("its CA is not one this route trusts (key id 'web host', serial 7",
                      client.certificate_refused)
        expired = certificate(self.ca, self.host_key, before=NOW - 1)
        self.asked.clear()
        client = self.exchange(ShownKey(ED_CERT, expired, self.host_key, b"ssh-ed25519"),
                               (blob_of(self.ca),))
        self.assertIn("expired at", client.certificate_refused)
        self.assertEqual(self.asked, [])  # the route is not asked about a bad certificate

    def test_a_certificate_under_a_plain_algorithm_is_no_known_key(self) -> None:
        """Never handed to the route's check (which could pin it on first use)."""
        blob = certificate(self.ca, self.host_key)
        client = self.exchange(ShownKey(b"ssh-ed25519", blob, self.host_key,
                                        b"ssh-ed25519"), (blob,))
        self.assertFalse(client.secured)
        self.assertTrue(client.wrong_host_key)
        self.assertEqual(self.asked, [])

    def test_plain_keys_are_conchs(self) -> None:
        plain = blob_of(self.host_key)
        client = self.exchange(ShownKey(b"ssh-ed25519", plain, self.host_key, b"ssh-ed25519"),
                               (), [*CERTIFICATE_HOST_KEYS, b"ssh-ed25519"], keys=(plain,))
        self.assertTrue(client.secured)
        self.assertEqual(self.asked, [plain])

    def test_a_cas_key_is_no_host_key(self) -> None:
        """A server showing the route's CA key itself as its host key is refused, as
        OpenSSH refuses it: a CA signs host keys, it is not one."""
        ca = blob_of(self.ca)
        client = self.exchange(ShownKey(b"ssh-ed25519", ca, self.ca, b"ssh-ed25519"),
                               (ca,), [*CERTIFICATE_HOST_KEYS, b"ssh-ed25519"])
        self.assertFalse(client.secured)
        self.assertTrue(client.wrong_host_key)

    def test_a_host_key_is_no_ca(self) -> None:
        """A certificate signed by one of the route's plain host keys is refused: that
        key is trusted as a server's key, not to vouch for others."""
        signer = blob_of(self.ca)
        blob = certificate(self.ca, self.host_key)
        client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"),
                               (), keys=(signer,))
        self.assertFalse(client.secured)
        self.assertIn("its CA is not one this route trusts", client.certificate_refused)
        self.assertEqual(self.asked, [signer])


    def test_a_revoked_host_key_is_refused_before_the_route_is_asked(self) -> None:
        """Even when the route lists it: the check is not asked, so trust on first use
        never pins a revoked key, and a pin revoked later is refused."""
        plain = blob_of(self.host_key)
        client = self.exchange(ShownKey(b"ssh-ed25519", plain, self.host_key, b"ssh-ed25519"),
                               (), [b"ssh-ed25519"], keys=(plain,), revoked=frozenset({plain}))
        self.assertFalse(client.secured)
        self.assertEqual(self.asked, [])
        self.assertEqual(client.revoked_shown, "the server's host key " + fingerprint(plain))
        (event,) = [e for e in self.events if e.get("log_level") == LogLevel.error
                    and e.get("log_namespace") == "gateway.ssh"]
        self.assertEqual(formatEvent(event), f"ssh: route db: the server's host key "
                                             f"{fingerprint(plain)} is revoked; refused")

    def test_a_certificate_whose_key_or_ca_is_revoked_is_refused(self) -> None:
        blob = certificate(self.ca, self.host_key)
        for revoked, what in ((blob_of(self.host_key), "the key of"),
                              (blob_of(self.ca), "the CA of")):
            self.asked.clear()
            client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"),
                                   (blob_of(self.ca),), revoked=frozenset({revoked}))
            self.assertEqual((client.secured, client.disconnected), (False, b"bad host key"))
            self.assertEqual(client.revoked_shown,
                             f"{what} the server's host certificate {fingerprint(revoked)}")
            self.assertEqual(self.asked, [])
        # another revoked key changes nothing
        client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"),
                               (blob_of(self.ca),),
                               revoked=frozenset({blob_of(rsa_key())}))
        self.assertTrue(client.secured)

    def test_a_certificate_revoked_by_serial_or_key_id_in_a_krl(self) -> None:
        blob = certificate(self.ca, self.host_key)  # serial 7, key id "web host"
        ca = blob_of(self.ca)
        for section in (CertificateRevocations((5,), (9,)),
                        CertificateRevocations(key_ids=frozenset({"web host"}))):
            for krl_ca in (ca, b""):  # its CA's section, or any CA's
                client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"),
                                       (ca,), krl=Krl(certificates=((krl_ca, section),)))
                self.assertFalse(client.secured)
                self.assertIn("the server's host certificate (key id 'web host', serial 7, "
                              "CA SHA256:", client.revoked_shown)
        for other in (CertificateRevocations((8,), (9,)),
                      CertificateRevocations(key_ids=frozenset({"db host"}))):
            client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"),
                                   (ca,), krl=Krl(certificates=((ca, other),)))
            self.assertTrue(client.secured)
        # another CA's section does not revoke this CA's certificates
        client = self.exchange(ShownKey(ED_CERT, blob, self.host_key, b"ssh-ed25519"), (ca,),
                               krl=Krl(certificates=((blob_of(rsa_key()),
                                                      CertificateRevocations((7,), (7,))),)))
        self.assertTrue(client.secured)

    def test_the_person_is_told_which_key_is_revoked(self) -> None:
        ready: Deferred[UpstreamConnection] = Deferred()
        client = UpstreamTransport(pinned_check(()), [b"ssh-ed25519"],
                                   CertificateAuth("root", None,  # type: ignore[arg-type]
                                                   UpstreamConnection(Deferred())),
                                   ready, HOST, time.time)
        client.revoked_shown = "the server's host key SHA256:abc"
        client.connectionLost(None)
        failure = self.failureResultOf(ready, UpstreamFailed)
        self.assertEqual(str(failure.value), "the server's host key SHA256:abc is revoked")


class RekeyTests(SynchronousTestCase):
    def test_authentication_is_requested_once_not_at_each_rekey(self) -> None:
        """Conch calls ``connectionSecure`` at every NEWKEYS. The gateway's client asked
        for ssh-userauth again at each rekey of a long scp; OpenSSH answers that with
        UNIMPLEMENTED, but a stricter server would close the connection."""
        conn = UpstreamConnection(Deferred())
        client = UpstreamTransport(pinned_check(()), [b"ssh-ed25519"],
                                   CertificateAuth("root", None, conn),  # type: ignore[arg-type]
                                   Deferred(), HOST, time.time)
        sent: list[tuple[int, bytes]] = []
        client.sendPacket = lambda kind, payload: sent.append((kind, payload))  # type: ignore[method-assign]
        for _ in range(3):
            client.connectionSecure()
        self.assertEqual([kind for kind, _ in sent], [5])  # MSG_SERVICE_REQUEST
        self.assertEqual(sent[0][1], NS(b"ssh-userauth"))
