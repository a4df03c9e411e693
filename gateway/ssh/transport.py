"""The SSH server's transport and factory: current algorithms only (``algorithms``), a
login grace time, a cap on unauthenticated connections per client address and in all,
a bound on what is buffered before authentication, and the penalty for addresses that
keep breaking the rules. What happens after the key exchange is the ``auth`` service's,
then the ``channel_relay``'s.

**Strikes.** Each bound cuts one connection, but a client reconnects after every cut. So,
as for HTTP/2 (``gateway.dataplane.penalty``, whose bookkeeping this reuses in a
``Penalties`` of the SSH server's own), a cut for breaking a rule no honest client
breaks is a strike against the client's address: too many failed attempts (every
unanswered keyboard-interactive ask is one), too many keys offered, too many pending
sign-ins from its address, too much data before authentication, a malformed or
out-of-turn authentication message, any message the checks of ``message_checks``
refuse (a protocol error), asking for the authentication service a second time.
Three within 30 s and the address's new
connections are held unread for a while and closed (``tarpit``) for 10 s, doubling
while it goes on. No strike for the login grace running out or a sign-in not
completed (a person at a browser, a slow network: ``timeout_read`` is none for HTTP/2
either), a policy's refusal, the total bound on pending sign-ins (everyone's), or the
cap on unauthenticated connections (a burst of honest connections, such as Ansible's
forks, reaches it; the cap itself bounds it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from twisted.conch.ssh import keys, transport
from twisted.conch.ssh.common import NS
from twisted.conch.ssh.connection import MSG_CHANNEL_OPEN_FAILURE
from twisted.conch.ssh.factory import SSHFactory
from twisted.internet.interfaces import IAddress, IDelayedCall
from twisted.internet.protocol import Protocol
from twisted.logger import Logger

from gateway.dataplane.listeners.tarpit import Tarpit
from gateway.dataplane.penalty import Penalties
from gateway.ssh import algorithms, limits
from gateway.ssh.message_checks import CheckedTransport
from gateway.ssh.metrics import REFUSED, STRIKES

log = Logger(namespace="gateway.ssh")


def disconnect(ssh: Any, code: int, message: str) -> None:
    """Send SSH_MSG_DISCONNECT with ``message`` (what OpenSSH prints) and close."""
    ssh.sendDisconnect(code, message.encode("utf-8", "replace")[:1000])


def refuse_channel(ssh: Any, sender: int, code: int, text: str) -> None:
    """SSH_MSG_CHANNEL_OPEN_FAILURE for the client's channel ``sender`` (RFC 4254 5.1)
    with ``text`` as its description, which OpenSSH prints."""
    ssh.sendPacket(MSG_CHANNEL_OPEN_FAILURE,
                   struct.pack(">2L", sender, code) + NS(text.encode()) + NS(b""))


class GatewayServerTransport(CheckedTransport, transport.SSHServerTransport):
    supportedCiphers = algorithms.CIPHERS
    supportedMACs = algorithms.MACS
    supportedKeyExchanges = algorithms.KEY_EXCHANGES
    supportedCompressions = algorithms.COMPRESSIONS
    # no Twisted version for scanners
    ourVersionString = b"SSH-2.0-gateway"

    factory: GatewayFactory
    authenticated = False
    lost = False  # the connection is gone (its service may still be finishing work)
    jump_route = ""  # the inner connection of a jump: the route its channel names
    client_ip = ""
    _grace: IDelayedCall | None = None
    _extended = False
    userauth_started = False  # one ssh-userauth service per connection
    on_lost: Callable[[], None] | None = None

    def connectionMade(self) -> None:
        assert self.transport is not None
        self.client_ip = getattr(self.transport.getPeer(), "host", "")
        self._grace = self.factory.reactor.callLater(limits.LOGIN_GRACE, self._too_slow)
        base: Any = super()
        base.connectionMade()

    def extend_grace(self, seconds: float) -> None:
        """A sign-in is pending: the person gets ``seconds`` from now to finish it.
        Once per connection: a later call (a client asking again) changes nothing."""
        if self._grace is not None and self._grace.active() and not self._extended:
            self._extended = True
            self._grace.reset(seconds)

    def strike(self, rule: str) -> None:
        """This connection is being cut for breaking ``rule`` (see the module's
        docstring): a strike against its address."""
        self.factory.strike(self.client_ip, rule)

    def _too_slow(self) -> None:
        self._grace = None
        if not self.authenticated:
            disconnect(self, transport.DISCONNECT_NO_MORE_AUTH_METHODS_AVAILABLE,
                       "authentication took too long")

    def mark_authenticated(self) -> None:
        if not self.authenticated:
            self.authenticated = True
            self.factory.release(self.client_ip)
            if self._grace is not None and self._grace.active():
                self._grace.cancel()
            self._grace = None

    def dataReceived(self, data: bytes) -> None:
        if not self.authenticated and len(self.buf) + len(data) > limits.PREAUTH_BUFFER:
            if not self.lost and not getattr(self.transport, "disconnecting", False):
                self.strike("preauth_buffer")
                disconnect(self, transport.DISCONNECT_PROTOCOL_ERROR, "too much data")
            return
        base: Any = super()
        base.dataReceived(data)

    def receiveError(self, reasonCode: int, description: bytes) -> None:
        """The client's disconnect message: its normal way to leave, not an error (the
        connection's end is logged by the service)."""

    def connectionLost(self, reason: Any = None) -> None:
        self.lost = True
        if not self.authenticated:
            self.factory.release(self.client_ip)
            self.authenticated = True  # released once
        if self._grace is not None and self._grace.active():
            self._grace.cancel()
        if self.on_lost is not None:
            self.on_lost()
        super().connectionLost(reason)


class GatewayFactory(SSHFactory):
    """``services``: ``ssh-userauth`` made by ``userauth`` for each connection; the
    connection service is set by the auth service itself once a person is admitted."""

    protocol = GatewayServerTransport

    def __init__(self, reactor: Any, host_keys: list[keys.Key],
                 userauth: Callable[[GatewayServerTransport], Any]) -> None:
        self.reactor = reactor
        self.privateKeys = {k.sshType(): k for k in host_keys}
        self.publicKeys = {k.sshType(): k.public() for k in host_keys}
        self.primes = None
        self.userauth = userauth
        self.unauthenticated: dict[str, int] = {}
        self.penalties = Penalties(clients="SSH clients that keep breaking the rules")
        self.tarpit = Tarpit(reactor)

    def set_host_keys(self, host_keys: list[keys.Key]) -> None:
        self.privateKeys = {k.sshType(): k for k in host_keys}
        self.publicKeys = {k.sshType(): k.public() for k in host_keys}

    def buildProtocol(  # type: ignore[override]
            self, addr: IAddress | None) -> GatewayServerTransport | Protocol | None:
        """The connection's transport; for a penalised address a held connection
        (``tarpit``) or None (closed at once); None past the unauthenticated cap."""
        ip = getattr(addr, "host", "")
        if self.penalties.refuses(ip, self.reactor.seconds()):
            REFUSED.labels("penalty").inc()
            return self.tarpit.protocol(ip)
        count = self.unauthenticated.get(ip, 0)
        if count >= limits.UNAUTHENTICATED_PER_ADDRESS or \
                sum(self.unauthenticated.values()) >= limits.UNAUTHENTICATED_TOTAL:
            REFUSED.labels("unauthenticated").inc()
            log.warn("ssh: refused a connection from {client}: too many unauthenticated "
                     "connections", client=ip)
            return None
        self.unauthenticated[ip] = count + 1
        built = super().buildProtocol(addr)
        assert isinstance(built, GatewayServerTransport)
        built.supportedPublicKeys = [alg for alg in built.supportedPublicKeys
                                     if alg in algorithms.SIGNATURES]
        built.supportedKeyExchanges = algorithms.KEY_EXCHANGES
        return built

    def strike(self, ip: str, rule: str) -> None:
        STRIKES.labels(rule).inc()
        seconds = self.penalties.strike(ip, rule, self.reactor.seconds())
        if seconds is not None:
            log.warn("ssh: client {client} refused for {seconds:g} s: its connections keep "
                     "breaking the rules (last: {rule})", client=ip, seconds=seconds,
                     rule=rule, penalty=seconds)

    def release(self, ip: str) -> None:
        left = self.unauthenticated.get(ip, 0) - 1
        if left > 0:
            self.unauthenticated[ip] = left
        else:
            self.unauthenticated.pop(ip, None)

    def getService(self, transport: Any, service: bytes) -> Any:
        if service != b"ssh-userauth" or transport.authenticated:
            return None
        if transport.userauth_started:
            # A second ssh-userauth would be a fresh service, its attempts and its
            # pending sign-in forgotten: a way round the bounds on each. OpenSSH asks
            # once; Conch answers None with DISCONNECT_SERVICE_NOT_AVAILABLE.
            transport.strike("service_again")
            return None
        transport.userauth_started = True
        return lambda: self.userauth(transport)
