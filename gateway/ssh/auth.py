"""The server side of ``ssh-userauth``: the client proves it holds a key (publickey with
a signature, verified here); a key bound to a live session goes straight to the route's
decision; an unbound one is answered "partial success, keyboard-interactive", which
shows the sign-in link and waits for the person to confirm it in a browser.

Before the decision nothing tells whether a route or a person exists: a bad user name,
an unknown key and an unknown route all look the same until the key is bound.

A connection has at most one pending sign-in (``sign_ins``): asking keyboard-interactive
again before answering shows the same link (no new ticket, no log line, no store
access), counts as a failed attempt, and neither restarts the ticket's 5 minutes nor the
login timer, which the first ask set. A cut for breaking a rule is a strike against the
client's address (``transport``).
"""

from __future__ import annotations

import struct
from collections.abc import Coroutine
from typing import Any, Protocol

from twisted.conch.ssh import keys, service, transport
from twisted.conch.ssh.common import NS, getNS
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.config.known_hosts import fingerprint
from gateway.sessions.model import Session
from gateway.ssh import algorithms, limits
from gateway.ssh.channel_relay import RelayedConnection
from gateway.ssh.jump import JumpConnection
from gateway.ssh.sign_ins import TooManySignIns
from gateway.ssh.transport import GatewayServerTransport, disconnect
from gateway.ssh.user_names import BadUserName, LoginTarget, parse_login, parse_user

log = Logger(namespace="gateway.ssh")

MSG_USERAUTH_REQUEST = 50
MSG_USERAUTH_FAILURE = 51
MSG_USERAUTH_SUCCESS = 52
MSG_USERAUTH_BANNER = 53
MSG_USERAUTH_PK_OK = 60
MSG_USERAUTH_INFO_REQUEST = 60
MSG_USERAUTH_INFO_RESPONSE = 61


class Refused(Exception):
    """The person may not log in; ``str(self)`` is the line they read."""


# the connection service an admitted person gets: relayed to the route's server, or a
# jump host's
Admitted = RelayedConnection | JumpConnection


class Gate(Protocol):
    """What authenticating asks of the SSH service (``gateway.ssh.service``)."""

    async def bound_session(self, key_fingerprint: str) -> Session | None:
        """The live session the key is bound to, or None."""
        ...

    async def start_sign_in(self, ssh: GatewayServerTransport, target: LoginTarget,
                            key_fingerprint: str) -> tuple[str, str]:
        """(the URL to show, the ticket to wait on), or ``TooManySignIns``; the
        connection says when it is done with the ticket (``end_sign_in``)."""
        ...

    def end_sign_in(self, ssh: GatewayServerTransport, ticket: str, confirmed: bool
                    ) -> None:
        """The connection that showed ``ticket`` is done with it (``confirmed``: its
        person confirmed it)."""
        ...

    async def wait_sign_in(self, ssh: GatewayServerTransport, ticket: str
                           ) -> Session | None:
        """The session that confirmed ``ticket``, or None (the ticket expired, or the
        connection ended: ``end_sign_in`` ends the wait)."""
        ...

    async def admit(self, ssh: GatewayServerTransport, target: LoginTarget, session: Session,
                    key_fingerprint: str) -> Admitted:
        """Decide and reach the server: the connection service to start, or
        ``Refused``."""
        ...


def _signature_algorithm(signature: bytes) -> bytes:
    try:
        return bytes(getNS(signature)[0])
    except (struct.error, ValueError, IndexError):
        return b""


class GatewayUserAuth(service.SSHService):
    name = b"ssh-userauth"
    protocolMessages = {MSG_USERAUTH_REQUEST: "MSG_USERAUTH_REQUEST",
                        MSG_USERAUTH_INFO_RESPONSE: "MSG_USERAUTH_INFO_RESPONSE"}

    def __init__(self, ssh: GatewayServerTransport, gate: Gate) -> None:
        self.ssh = ssh
        self.gate = gate
        self.failures = 0
        self.queries = 0
        self.busy = False
        self.proven: tuple[bytes, str] | None = None  # (user name, key fingerprint)
        # the connection's one sign-in, from the first ask: its link, ticket, target and
        # key (a later ask, even naming another target, shows the same link)
        self.sign_in: tuple[str, str, LoginTarget, str] | None = None
        self.answered = False  # the client answered the link (INFO_RESPONSE)
        self.stopped = False
        self.confirmed = False  # the sign-in's person confirmed it

    # -- answers

    def _send(self, kind: int, payload: bytes) -> None:
        conch: Any = self.ssh  # (Conch's methods carry no annotations)
        conch.sendPacket(kind, payload)

    def _cut(self, rule: str, code: int, message: str) -> None:
        """Disconnect for breaking ``rule``: a strike against the client's address."""
        self.ssh.strike(rule)
        disconnect(self.ssh, code, message)

    def _count_failure(self) -> bool:
        """Every failure counts, "none", partial successes and unanswered asks too: each
        one costs the gateway a reply (and a databroker read for a proven key). False:
        that was one too many, and the connection is cut."""
        self.failures += 1
        if self.failures > limits.AUTH_ATTEMPTS:
            self._cut("auth_attempts", transport.DISCONNECT_NO_MORE_AUTH_METHODS_AVAILABLE,
                      "too many authentication failures")
            return False
        return True

    def _fail(self, methods: bytes = b"publickey", partial: bool = False) -> None:
        if self._count_failure():
            self._send(MSG_USERAUTH_FAILURE,
                       NS(methods) + (b"\x01" if partial else b"\x00"))

    def serviceStopped(self) -> None:
        """The connection ended or was admitted: the desk learns whether its sign-in
        was confirmed (an unconfirmed one stays pending until it expires)."""
        self.stopped = True
        if self.sign_in is not None:
            self.gate.end_sign_in(self.ssh, self.sign_in[1], self.confirmed)

    def banner(self, text: str) -> None:
        self._send(MSG_USERAUTH_BANNER, NS(text.encode("utf-8", "replace")) + NS(b""))

    # -- requests

    def ssh_USERAUTH_REQUEST(self, packet: bytes) -> None:
        if self.busy:  # one request at a time (RFC 4252 5: no new one before the answer)
            self._cut("protocol", transport.DISCONNECT_PROTOCOL_ERROR,
                      "authentication request while another is in progress")
            return
        try:
            user, next_service, method, rest = getNS(packet, 3)
        except (struct.error, ValueError, IndexError):
            self._cut("protocol", transport.DISCONNECT_PROTOCOL_ERROR, "bad request")
            return
        if next_service != b"ssh-connection":
            self._cut("protocol", transport.DISCONNECT_SERVICE_NOT_AVAILABLE,
                      "only ssh-connection is served")
            return
        try:
            # a jump's inner connection: the route is the one its channel was opened to
            target = parse_login(user, self.ssh.jump_route) if self.ssh.jump_route \
                else parse_user(user)
        except BadUserName:
            target = None
        if self.proven is not None and self.proven[0] != user:
            self.proven = None  # another user name: prove the key again
        if method == b"publickey":
            self._publickey(user, target, rest)
        elif method == b"keyboard-interactive" and self.proven is not None \
                and target is not None:
            self._interactive(target)
        else:
            self._fail()

    def _publickey(self, user: bytes, target: LoginTarget | None, rest: bytes) -> None:
        try:
            has_signature = rest[0]
            algorithm, blob, tail = getNS(rest[1:], 2)
            if len(blob) > limits.KEY_BLOB:
                raise ValueError("key too large")
            key = keys.Key.fromString(blob)
        except (struct.error, ValueError, IndexError, keys.BadKeyError):
            self._fail()
            return
        except Exception:  # whatever else a hostile key blob makes the parser raise
            self._fail()
            return
        if algorithm not in algorithms.SIGNATURES or \
                algorithm not in key.supportedSignatureAlgorithms():
            self._fail()
            return
        if not has_signature:
            self.queries += 1
            if self.queries > limits.KEY_QUERIES:
                self._cut("key_queries", transport.DISCONNECT_NO_MORE_AUTH_METHODS_AVAILABLE,
                          "too many keys offered")
                return
            self._send(MSG_USERAUTH_PK_OK, NS(algorithm) + NS(blob))
            return
        try:
            signature = getNS(tail)[0]
        except (struct.error, ValueError, IndexError):
            self._fail()
            return
        assert self.ssh.sessionID is not None
        signed = (NS(self.ssh.sessionID) + bytes((MSG_USERAUTH_REQUEST,)) + NS(user)
                  + NS(b"ssh-connection") + NS(b"publickey") + b"\x01" + NS(algorithm)
                  + NS(blob))
        try:
            valid = _signature_algorithm(signature) == algorithm and \
                key.verify(signature, signed)
        except Exception:  # a malformed signature
            valid = False
        if not valid or target is None:
            self._fail()
            return
        key_fingerprint = fingerprint(blob)
        self.proven = (user, key_fingerprint)
        self._run(self._bound_or_ask(target, key_fingerprint))

    def _run(self, work: Coroutine[Any, Any, None]) -> None:
        self.busy = True
        d: Deferred[None] = ensureDeferred(work)

        def failed(reason: Failure) -> None:
            log.failure("ssh: authentication failed unexpectedly", reason)
            disconnect(self.ssh, transport.DISCONNECT_BY_APPLICATION,
                       "the gateway could not complete the login; try again")

        def done(_: object) -> None:
            self.busy = False

        d.addErrback(failed).addBoth(done)

    async def _bound_or_ask(self, target: LoginTarget, key_fingerprint: str) -> None:
        session = await self.gate.bound_session(key_fingerprint)
        if session is None:
            # proven but not bound: keyboard-interactive signs the person in (the banner
            # first: a client that cannot go on, BatchMode, stops at the failure)
            self.banner("This key is not signed in yet; keyboard-interactive "
                        "authentication shows where to sign in (BatchMode cannot).\n")
            self._fail(b"keyboard-interactive", partial=True)
            return
        await self._admit(target, session, key_fingerprint)

    def _interactive(self, target: LoginTarget) -> None:
        assert self.proven is not None
        if self.sign_in is not None:
            # asked again instead of answering (RFC 4256 lets a new request abandon the
            # last): the same link, as a failed attempt, from nothing but memory
            if self._count_failure():
                self._show(self.sign_in[0])
            return
        self._run(self._ask(target, self.proven[1]))

    async def _ask(self, target: LoginTarget, key_fingerprint: str) -> None:
        try:
            url, ticket = await self.gate.start_sign_in(self.ssh, target, key_fingerprint)
        except TooManySignIns as refused:
            if self.stopped:
                return
            if refused.reason == "address":  # its own sign-ins; the total is everyone's
                self.ssh.strike("sign_in_bound")
            disconnect(self.ssh, transport.DISCONNECT_TOO_MANY_CONNECTIONS, str(refused))
            return
        self.sign_in = (url, ticket, target, key_fingerprint)
        if self.stopped:  # gone while the ticket was being written (it stays pending)
            return
        # the 5 minutes start now, once: the ticket expires SIGN_IN_SECONDS after this
        self.ssh.extend_grace(limits.SIGN_IN_WAIT + 10)
        self._show(url)

    def _show(self, url: str) -> None:
        instruction = f"Sign in at {url} to continue\n".encode()
        self._send(MSG_USERAUTH_INFO_REQUEST,
                   NS(b"") + NS(instruction) + NS(b"") + struct.pack(">L", 0))

    def ssh_USERAUTH_INFO_RESPONSE(self, packet: bytes) -> None:
        if self.sign_in is None or self.answered or self.busy or self.proven is None:
            self._cut("protocol", transport.DISCONNECT_PROTOCOL_ERROR,
                      "unexpected response")
            return
        self.answered = True
        _, ticket, target, key_fingerprint = self.sign_in
        self._run(self._wait(ticket, target, key_fingerprint))

    async def _wait(self, ticket: str, target: LoginTarget, key_fingerprint: str) -> None:
        session = await self.gate.wait_sign_in(self.ssh, ticket)
        self.confirmed = session is not None
        if self.stopped:  # the connection ended, which ended the wait: nobody to tell
            return
        if session is None:
            disconnect(self.ssh, transport.DISCONNECT_NO_MORE_AUTH_METHODS_AVAILABLE,
                       "the sign-in was not completed in time; connect again")
            return
        await self._admit(target, session, key_fingerprint)

    async def _admit(self, target: LoginTarget, session: Session, key_fingerprint: str
                     ) -> None:
        try:
            connection = await self.gate.admit(self.ssh, target, session, key_fingerprint)
        except Refused as refused:
            disconnect(self.ssh, transport.DISCONNECT_NO_MORE_AUTH_METHODS_AVAILABLE,
                       str(refused))
            return
        if self.ssh.lost or getattr(self.ssh.transport, "disconnecting", False):
            # the person left while the server was being reached: nothing to relay
            connection.abandon()
            return
        self.ssh.mark_authenticated()
        self._send(MSG_USERAUTH_SUCCESS, b"")
        conch: Any = self.ssh
        conch.setService(connection)
