"""``CertifiedHostKeyClient``: Conch's SSH client transport accepting a host key
certificate (``...-cert-v01@openssh.com``) from the server.

Conch's client reads the server's host key blob with ``keys.Key.fromString`` in its
key exchange reply handlers, which knows no certificates, so a certificate fails there
after ``verifyHostKey``. When the negotiated host key algorithm is a certificate one,
the reply (ECDH: every key exchange the gateway's client offers) is handled here the way
Conch's ``_ssh_KEX_ECDH_REPLY`` does, with two differences: the subclass's
``certifiedHostKey`` checks the certificate and answers the key it certifies, and the
exchange's signature must be that key's (of the plain algorithm: OpenSSH signs with
``ssh-ed25519``, ``rsa-sha2-512``... under a certificate). The exchange hash covers
the certificate blob as sent. Any other algorithm goes to Conch unchanged.

Private names relied on: ``RELIES_ON`` (checked by ``tests/unit/test_twisted_canary.py``).
The public-looking attributes it reads (``ecPriv``/``ecPub``, the key exchange
payloads) are set by Conch's methods, not documented: the canary looks for them too.
"""

from __future__ import annotations

from typing import Any

from twisted.conch.ssh import _kex, keys, transport
from twisted.conch.ssh.common import NS, getNS
from twisted.internet.defer import Deferred

RELIES_ON = (
    ("twisted.conch.ssh.transport", "SSHClientTransport",
     ("ssh_KEX_DH_GEX_GROUP", "_generateECSharedSecret", "_encodeECPublicKey",
      "_keySetup")),
    ("twisted.conch.ssh._kex", "", ("getHashProcessor", "isEllipticCurve")),
)
RELIES_ON_INSTANCE = (
    ("twisted.conch.ssh.transport", "SSHClientTransport", ("ecPriv", "ecPub")),
    ("twisted.conch.ssh.transport", "SSHTransportBase",
     ("ourKexInitPayload", "otherKexInitPayload", "otherVersionString", "kexAlg",
      "keyAlg")),
)


class CertifiedHostKeyClient(transport.SSHClientTransport):
    """Subclasses set ``certificateSignatures`` (certificate host key algorithm ->
    the signature algorithm its key exchange signature must have) and implement
    ``certifiedHostKey``."""

    certificateSignatures: dict[bytes, bytes] = {}

    def certifiedHostKey(self, hostKey: bytes) -> Deferred[keys.Key]:
        """The key the certificate ``hostKey`` certifies, once the certificate is
        checked; fails to refuse it."""
        raise NotImplementedError

    def ssh_KEX_DH_GEX_GROUP(self, packet: bytes) -> Any:
        wire: Any = self
        if wire.keyAlg not in self.certificateSignatures:
            base: Any = super()
            return base.ssh_KEX_DH_GEX_GROUP(packet)
        if not _kex.isEllipticCurve(wire.kexAlg):
            wire.sendDisconnect(transport.DISCONNECT_KEY_EXCHANGE_FAILED,
                                b"a certificate host key needs an ECDH key exchange")
            return None
        hostKey, pubKey, signature, _ = getNS(packet, 3)
        done = self.certifiedHostKey(hostKey)
        done.addCallback(self._certifiedReply, hostKey, pubKey, signature)
        done.addErrback(lambda _: wire.sendDisconnect(
            transport.DISCONNECT_HOST_KEY_NOT_VERIFIABLE, b"bad host key"))
        return done

    def _certifiedReply(self, key: keys.Key, hostKey: bytes, pubKey: bytes,
                        signature: bytes) -> None:
        wire: Any = self
        sharedSecret = wire._generateECSharedSecret(wire.ecPriv, pubKey)
        h = _kex.getHashProcessor(wire.kexAlg)()
        h.update(NS(wire.ourVersionString))
        h.update(NS(wire.otherVersionString))
        h.update(NS(wire.ourKexInitPayload))
        h.update(NS(wire.otherKexInitPayload))
        h.update(NS(hostKey))
        h.update(NS(wire._encodeECPublicKey(wire.ecPub)))
        h.update(NS(pubKey))
        h.update(sharedSecret)
        exchangeHash = h.digest()
        algorithm = getNS(signature)[0] if len(signature) >= 4 else b""
        if (algorithm != self.certificateSignatures[wire.keyAlg]
                or not key.verify(signature, exchangeHash)):
            wire.sendDisconnect(transport.DISCONNECT_KEY_EXCHANGE_FAILED, b"bad signature")
            return
        wire._keySetup(sharedSecret, exchangeHash)
