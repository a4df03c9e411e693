"""The gateway's SSH client toward a route's server: current algorithms only, the host
key checked against the route (its pinned keys, or the key pinned on first use), or a
host certificate (``host_cert``) from one of the route's host CAs, and publickey
authentication with the certificate just issued (``certs``): Conch's client knows no
certificates, so the ``...-cert-v01@openssh.com`` request is written here.

The route's check (``HostKeyCheck``) is asked about a plain host key's blob among the
route's keys, or, for a certificate that passed every other check, about the blob of
the CA that signed it among the route's CAs: the route's entries
(``SshRoute.host_keys``) hold both, marked apart (``authority``).

``connect`` answers the authenticated ``UpstreamConnection`` or fails with
``UpstreamFailed`` saying what the person can be told.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.conch.ssh import connection, keys, service, transport
from twisted.conch.ssh.common import NS
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.error import ConnectError
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import Logger

from gateway.config.known_hosts import HostKey, fingerprint
from gateway.config.ssh import Revocations
from gateway.ssh import algorithms
from gateway.ssh.certs import Issued
from gateway.ssh.host_cert import (
    CERTIFICATE_ALGORITHMS,
    CertificateRefused,
    HostCertificate,
    check_host_certificate,
    is_certificate,
)
from gateway.ssh.message_checks import CheckedConnection, CheckedTransport
from gateway.ssh.transport import refuse_channel
from gateway.twisted_ext.conch_kex import is_elliptic_curve
from gateway.twisted_ext.ssh_hostcert import CertifiedHostKeyClient

log = Logger(namespace="gateway.ssh")
CONNECT_TIMEOUT = 10.0
# host key blob -> True if it is the route's (may read and write the databroker: TOFU)
# (blob, as_authority) -> whether the route trusts it: a plain host key among its keys,
# or (``as_authority``) the CA of a checked certificate among its CAs. Synchronous by
# type: Conch's client misreads the server's next packet when the key exchange waits
# for an answer, so whatever a check needs (a pin) is read before connecting.
HostKeyCheck = Callable[[bytes, bool], bool]
# Conch's client does ECDH only (not the ML-KEM hybrids the server offers), and a host
# certificate's key exchange is handled for ECDH only (``twisted_ext.ssh_hostcert``)
CLIENT_KEY_EXCHANGES = [k for k in algorithms.KEY_EXCHANGES if is_elliptic_curve(k)]
CERTIFICATE_HOST_KEYS = list(CERTIFICATE_ALGORITHMS)
# What a server whose host key (or certificate) the gateway refuses is told: nothing of
# why (Conch's client would send its internal error's text); the why is in the log.
HOST_KEY_REFUSED = b"host key not accepted"


class UpstreamFailed(Exception):
    """The server could not be reached or refused the gateway (``str``: for the
    person)."""


class UpstreamConnection(CheckedConnection):
    """The client side's connection service: channels are opened by the relay
    (``channel_relay``); the
    server may open none toward the gateway (no forwarded ports, agents or X11)."""

    peer_role = "server"

    def __init__(self, ready: Deferred[UpstreamConnection]) -> None:
        base: Any = super()
        base.__init__()
        self.ready = ready
        self.lost: Callable[[], None] | None = None

    def log_fields(self) -> dict[str, Any]:
        return {"route": getattr(self.transport, "route", "")}

    def serviceStarted(self) -> None:
        base: Any = super()
        base.serviceStarted()
        if not self.ready.called:
            self.ready.callback(self)

    def ssh_CHANNEL_OPEN(self, packet: bytes) -> None:
        # refused here, not by raising from ``getChannel``: Conch logs that with a
        # traceback at each channel a server asks for (its framing is checked before)
        sender = int.from_bytes(packet[4 + int.from_bytes(packet[:4], "big"):][:4], "big")
        refuse_channel(self.transport, sender, connection.OPEN_ADMINISTRATIVELY_PROHIBITED,
                       "not allowed")

    def gotGlobalRequest(self, requestType: bytes, data: bytes) -> int:
        return 0

    def adjustWindow(self, channel: Any, bytesToAdd: int) -> None:
        if getattr(channel, "held", False):
            return  # the other side's buffer is full: withheld until it drains
        base: Any = super()
        base.adjustWindow(channel, bytesToAdd)


class CertificateAuth(service.SSHService):
    """``ssh-userauth`` with one certificate, signed and sent at once."""

    name = b"ssh-userauth"
    protocolMessages = {51: "MSG_USERAUTH_FAILURE", 52: "MSG_USERAUTH_SUCCESS",
                        53: "MSG_USERAUTH_BANNER"}

    def __init__(self, login: str, issued: Issued, conn: UpstreamConnection) -> None:
        self.login = login.encode()
        self.issued = issued
        self.conn = conn

    def serviceStarted(self) -> None:
        wire: Any = self.transport
        algorithm, blob = self.issued.algorithm, self.issued.certificate
        request = (NS(self.login) + NS(b"ssh-connection") + NS(b"publickey") + b"\x01"
                   + NS(algorithm) + NS(blob))
        signed = NS(wire.sessionID) + bytes((50,)) + request
        signature = keys.Key(self.issued.key).sign(signed)
        wire.sendPacket(50, request + NS(signature))

    def ssh_USERAUTH_SUCCESS(self, packet: bytes) -> None:
        wire: Any = self.transport
        wire.setService(self.conn)

    def ssh_USERAUTH_FAILURE(self, packet: bytes) -> None:
        wire: Any = self.transport
        wire.refused = True
        wire.sendDisconnect(transport.DISCONNECT_BY_APPLICATION, b"not accepted")

    def ssh_USERAUTH_BANNER(self, packet: bytes) -> None:
        pass  # a server's banner is not shown: the person talks to the gateway


class UpstreamTransport(CheckedTransport, CertifiedHostKeyClient):
    peer_role = "server"

    supportedCiphers = algorithms.CIPHERS
    supportedMACs = algorithms.MACS
    supportedKeyExchanges = CLIENT_KEY_EXCHANGES
    supportedCompressions = algorithms.COMPRESSIONS
    ourVersionString = b"SSH-2.0-gateway"
    certificateSignatures = {alg: sig for alg, (_, sig) in CERTIFICATE_ALGORITHMS.items()}

    def __init__(self, check: HostKeyCheck, host_key_algorithms: list[bytes],
                 auth: CertificateAuth, ready: Deferred[UpstreamConnection],
                 host: str, now: Callable[[], float],
                 revoked: Revocations | None = None, route: str = "") -> None:
        """``now``: the reactor's clock (a host certificate's validity)."""
        self.check = check
        self.revoked = revoked or Revocations()  # refused whatever else trusts them
        self.route = route  # (for the log)
        self.supportedPublicKeys = host_key_algorithms
        self.auth = auth
        self.ready = ready
        self.host = host  # what a host certificate must name
        self.now = now
        self.refused = False
        self.wrong_host_key = False
        self.certificate_refused = ""
        self.revoked_shown = ""  # "the server's host key SHA256:..." when one was revoked
        self.authenticating = False  # ssh-userauth requested (once: not at each rekey)
        self.remote_error = ""

    def _revoked(self, blob: bytes, what: str) -> bool:
        """Whether ``blob`` is revoked (logged, and told to the person as ``what`` and
        its fingerprint). Asked before the route's check: a revoked key is never
        pinned on first use, and a pin revoked later is refused."""
        if not self.revoked.key(blob):
            return False
        self._refused_as_revoked(f"{what} {fingerprint(blob)}")
        return True

    def _certificate_revoked(self, cert: HostCertificate) -> bool:
        """Its key or its CA revoked, or (a KRL) its serial or key id."""
        if self._revoked(cert.key_blob, "the key of the server's host certificate") \
                or self._revoked(cert.ca_blob, "the CA of the server's host certificate"):
            return True
        if not self.revoked.certificate(cert.ca_blob, cert.serial, cert.key_id):
            return False
        self._refused_as_revoked(f"the server's host certificate ({cert.identity()})")
        return True

    def _refused_as_revoked(self, shown: str) -> None:
        self.revoked_shown = shown
        log.error("ssh: route {route}: {shown} is revoked; refused",
                  route=self.route, shown=shown)

    def verifyHostKey(self, hostKey: bytes, fingerprint: bytes) -> Deferred[bool]:
        if self._revoked(hostKey, "the server's host key"):
            return fail(UpstreamFailed("host key revoked"))
        # a certificate under a plain algorithm is no key the route could know
        if not is_certificate(hostKey) and self.check(hostKey, False):
            return succeed(True)
        self.wrong_host_key = True
        return fail(UpstreamFailed("host key mismatch"))

    def certifiedHostKey(self, hostKey: bytes) -> Deferred[keys.Key]:
        wire: Any = self
        try:
            cert = check_host_certificate(hostKey, wire.keyAlg, self.host, self.now())
            if self._certificate_revoked(cert):
                raise CertificateRefused("revoked")
            if not self.check(cert.ca_blob, True):
                raise CertificateRefused("its CA is not one this route trusts",
                                         cert.identity())
            key: keys.Key = keys.Key.fromString(cert.key_blob)
        except CertificateRefused as refused:
            self.certificate_refused = str(refused)
            return fail(refused)
        except Exception as unexpected:  # refuses too, not raised into Conch's dispatch
            return fail(unexpected)
        return succeed(key)

    def connectionSecure(self) -> None:
        # Conch calls this at every NEWKEYS, a rekey's too: the service is asked for
        # once (a second request after authentication is a protocol error to a server)
        if self.authenticating:
            return
        self.authenticating = True
        wire: Any = self
        wire.requestService(self.auth)

    def sendDisconnect(self, reason: int, desc: bytes) -> None:
        if reason == transport.DISCONNECT_HOST_KEY_NOT_VERIFIABLE:
            desc = HOST_KEY_REFUSED  # Conch's ECDH reply puts the Failure's text there
        base: Any = super()
        base.sendDisconnect(reason, desc)

    def receiveError(self, reasonCode: int, description: bytes) -> None:
        # (not Conch's error-level line: the connection's end is logged by the service)
        self.remote_error = description.decode("utf-8", "replace")[:200]

    def connectionLost(self, reason: Any = None) -> None:
        base: Any = super()
        base.connectionLost(reason)
        if not self.ready.called:
            if self.revoked_shown:
                why = f"{self.revoked_shown} is revoked"
            elif self.certificate_refused:
                why = f"the server's host certificate is refused: {self.certificate_refused}"
            elif self.wrong_host_key:
                why = "the server's host key is not the one this route trusts"
            elif self.refused:
                why = "the server did not accept the gateway's certificate for this login"
            else:
                why = "the server closed the connection" + (
                    f" ({self.remote_error})" if self.remote_error else "")
            self.ready.errback(UpstreamFailed(why))
        lost = self.auth.conn.lost
        if lost is not None:
            lost()


def host_key_algorithms(pinned: tuple[HostKey, ...]) -> list[bytes]:
    """With host CAs among the route's entries, the certificate algorithms first (a
    server with a certificate shows it); then the pinned keys' algorithms only (so the
    server shows one of those), or every current one for trust on first use or a route
    with CAs only (a server without a certificate is then refused, its key named)."""
    out = list(CERTIFICATE_HOST_KEYS) if any(k.authority for k in pinned) else []
    plain = [k for k in pinned if not k.authority]
    if not plain:
        return out + list(algorithms.SIGNATURES)
    for key in plain:
        for alg in algorithms.HOST_KEY_SIGNATURES.get(key.type, []):
            if alg not in out:
                out.append(alg)
    return out


def pinned_check(pinned: tuple[HostKey, ...]) -> HostKeyCheck:
    """The route's entries as a check, its keys and its CAs apart (tests; the
    service's also pins on first use)."""
    keys_, authorities = trusted_blobs(pinned)

    def check(blob: bytes, as_authority: bool) -> bool:
        return blob in (authorities if as_authority else keys_)
    return check


def trusted_blobs(entries: tuple[HostKey, ...]) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """A route's plain host keys and its host CAs, apart (as OpenSSH keeps them: a CA's
    key is no host key, and a host key signs no certificate), in the route's order."""
    return (tuple(k.blob for k in entries if not k.authority),
            tuple(k.blob for k in entries if k.authority))


async def connect(reactor: Any, host: str, port: int, login: str, issued: Issued,
                  check: HostKeyCheck, host_key_algs: list[bytes],
                  timeout: float = CONNECT_TIMEOUT, revoked: Revocations | None = None,
                  route: str = "") -> UpstreamConnection:
    """``revoked``: keys refused as the host key, a certificate's key or its CA, and
    certificates refused by serial or key id; ``route``: the route's name, for the
    log."""
    ready: Deferred[UpstreamConnection] = Deferred()
    conn = UpstreamConnection(ready)
    auth = CertificateAuth(login, issued, conn)
    proto = UpstreamTransport(check, host_key_algs, auth, ready, host, reactor.seconds,
                              revoked, route)
    endpoint = (TCP6ClientEndpoint(reactor, host, port, timeout=timeout) if ":" in host
                else TCP4ClientEndpoint(reactor, host, port, timeout=timeout))
    try:
        await endpoint.connect(_Once(proto))
    except ConnectError as exc:
        raise UpstreamFailed(f"the server cannot be reached ({exc.__class__.__name__})") \
            from None
    wire: Any = proto
    timer = reactor.callLater(timeout, lambda: wire.transport and
                              wire.transport.abortConnection())
    try:
        return await ready
    finally:
        if timer.active():
            timer.cancel()


class _Once(Factory):
    noisy = False  # one per connection: no "Starting factory" lines

    def __init__(self, proto: Protocol) -> None:
        self.proto = proto

    def buildProtocol(self, addr: Any) -> Protocol:
        return self.proto
