"""The SSH server as a Twisted service (``gateway.tree`` adds it for ``ssh_address``):
the listener, the ``Gate`` that authentication asks (key bindings, sign-in, the route's
decision, the server's connection), continuous authorization of every open connection,
and one log line per connection.

It follows reloads: routes, keys and policies of the newest snapshot decide new
connections, and open ones are decided again within ``RECHECK_SECONDS``: a sign-out,
revocation, expiry, failed refresh, removed route or a policy that now denies closes the
connection with a message on the person's terminal.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol

from twisted.application.internet import StreamServerEndpointService, TimerService
from twisted.application.service import MultiService
from twisted.conch.ssh import keys, transport
from twisted.internet.defer import ensureDeferred
from twisted.internet.endpoints import TCP4ServerEndpoint, TCP6ServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpoint
from twisted.internet.task import deferLater
from twisted.logger import Logger

from gateway.authenticate.holder import IdentityHolder
from gateway.authenticate.ssh_sign_in import SSH_SIGN_IN
from gateway.authorize.ssh_logins import who
from gateway.config.known_hosts import fingerprint
from gateway.config.routes import Route
from gateway.config.running import ConfigSource
from gateway.config.snapshot import Snapshot
from gateway.config.ssh import (
    Revocations,
    SigningKey,
    SshRoute,
    load_private_key,
)
from gateway.config.values import parse_address
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.records import RecordStore
from gateway.databroker.ssh_records import bound_session_id
from gateway.dataplane.listeners.shared import AdoptedEndpoint
from gateway.sessions.live import LiveConnections, Unwatch
from gateway.sessions.model import Session
from gateway.ssh import limits, pins
from gateway.ssh.asciicast import Cast
from gateway.ssh.auth import GatewayUserAuth, Refused
from gateway.ssh.certs import Issued, issue
from gateway.ssh.channel_relay import Context, RelayedConnection
from gateway.ssh.jump import JumpConnection
from gateway.ssh.metrics import BYTES, CONNECTIONS, OPEN
from gateway.ssh.recorder import Recorder, RecordFile, Recording
from gateway.ssh.sign_ins import SignInDesk
from gateway.ssh.transport import GatewayFactory, GatewayServerTransport, disconnect
from gateway.ssh.upstream import (
    HostKeyCheck,
    UpstreamConnection,
    UpstreamFailed,
    connect,
    host_key_algorithms,
    trusted_blobs,
)
from gateway.ssh.user_names import LoginTarget
from gateway.twisted_ext.listen import raise_at_start

log = Logger(namespace="gateway.ssh")


@dataclass
class Active:
    """An admitted connection, decided again every ``RECHECK_SECONDS``."""

    ssh: GatewayServerTransport
    relay: RelayedConnection | None  # None: a jump host's outer connection
    session_id: str
    target: LoginTarget
    started: float
    serial: int
    reason: str
    ended: str = ""
    checking: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    unwatch: Unwatch | None = None  # leaves the registry of live connections


@dataclass(frozen=True, slots=True)
class Admission:
    """What ``decide`` lets in: the route, its server, the login (the one the policy
    gives when the user name named none), the person and the decision's reason."""

    route: Route
    server: SshRoute
    target: LoginTarget
    person: str
    reason: str


@dataclass(frozen=True, slots=True)
class JumpHost:
    """``decide``'s answer for a user name that names no route: a jump host's outer
    connection, whose inner connections are each decided for their route."""

    person: str


@dataclass(frozen=True, slots=True)
class Provision:
    """What reaching the server needs: the certificate, and for a trust-on-first-use
    route its pin claim (``held``; None for a route that lists its host keys)."""

    issued: Issued
    held: pins.Claim | None


class Dialer(Protocol):
    """How ``dial`` reaches a server: ``upstream.connect`` (tests give a fake)."""

    def __call__(self, reactor: Any, host: str, port: int, login: str, issued: Issued,
                 check: HostKeyCheck, host_key_algs: list[bytes], *,
                 revoked: Revocations | None = None, route: str = ""
                 ) -> Awaitable[UpstreamConnection]: ...


def _host_keys(snapshot: Snapshot) -> list[keys.Key]:
    return [keys.Key(load_private_key(k)) for k in snapshot.ssh_material.host_keys]


def _ca(snapshot: Snapshot) -> SigningKey:
    assert snapshot.ssh_material.user_ca_key is not None
    return load_private_key(snapshot.ssh_material.user_ca_key)


class SshService(MultiService):
    def __init__(self, source: ConfigSource, reactor: Any, holder: IdentityHolder,
                 records: RecordStore, changes: ChangeFollower,
                 inherited: int | None = None, live: LiveConnections | None = None
                 ) -> None:
        """``reactor`` is also the service's one clock (``_now``: wall time in
        production, a ``MemoryReactorClock`` in tests); ``changes``: the databroker's
        change stream, which wakes connections waiting for their sign-in;
        ``inherited``: the listening descriptor a worker's supervisor bound for
        ``ssh_address`` (adopted instead of binding); ``live``: the databroker's
        registry of live connections, which closes a connection when its session ends
        (without it, the recheck alone does)."""
        MultiService.__init__(self)
        self.reactor = reactor
        self.connect: Dialer = connect  # how ``dial`` reaches a server
        self.holder = holder
        self.authorize = holder.authorize_ssh  # every decision and its audit event
        self.records = records
        self.active: dict[str, Active] = {}
        self.live = live if live is not None else LiveConnections()
        self.recorder = Recorder(reactor)  # its thread starts with the first recording
        options = source.current.options
        self.sign_ins = SignInDesk(records, reactor, changes,
                                   lambda: holder.identity.auth_origin,
                                   SSH_SIGN_IN, options.ssh_max_pending_sign_ins_per_address,
                                   options.ssh_max_pending_sign_ins)
        self._apply(source.current)
        self.address = source.current.options.ssh_address
        self.factory = GatewayFactory(reactor, _host_keys(source.current), self._userauth)
        source.subscribe(self.apply)
        host, port = parse_address(self.address)
        endpoint: IStreamServerEndpoint = (
            AdoptedEndpoint(reactor, inherited) if inherited is not None
            else TCP6ServerEndpoint(reactor, port, interface=host) if ":" in host
            else TCP4ServerEndpoint(reactor, port, interface=host))
        listener = StreamServerEndpointService(endpoint, self.factory)
        raise_at_start(listener)
        MultiService.addService(self, listener)
        self.listener = listener
        recheck = TimerService(limits.RECHECK_SECONDS, self._recheck_all)
        recheck.clock = reactor
        MultiService.addService(self, recheck)

    # -- configuration

    def _apply(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.routes: dict[str, Route] = {
            r.ssh.name: r for r in snapshot.ssh_routes if r.ssh is not None}
        self.ca = _ca(snapshot)
        self.sign_ins.configure(snapshot.options.ssh_max_pending_sign_ins_per_address,
                                snapshot.options.ssh_max_pending_sign_ins)

    def apply(self, snapshot: Snapshot) -> None:
        if snapshot.options.ssh_address != self.address:
            log.warn("ssh_address changed from {old} to {new}: restart to listen on the new "
                     "address", old=self.address, new=snapshot.options.ssh_address)
        if not snapshot.options.ssh_address or snapshot.ssh_material.user_ca_key is None:
            return  # the SSH server keeps its keys until the restart that stops it
        self._apply(snapshot)
        self.factory.set_host_keys(_host_keys(snapshot))

    def startService(self) -> None:
        MultiService.startService(self)
        log.info("ssh: listening on {address} for {routes} route(s)", address=self.address,
                 routes=len(self.routes))

    def stopService(self) -> Any:
        stopped = MultiService.stopService(self)
        for active in list(self.active.values()):  # (their recordings' ends are queued)
            if active.relay is not None:
                active.relay.close_recordings()
        return stopped.addCallback(lambda _: self.recorder.stop())

    # -- the gateway's stop (``services.drain``): sessions are long-lived by nature,
    # kept until shutdown_drain_timeout, then closed with a message saying why

    def drain_begin(self) -> None:
        self.listener.stopService()  # (again at the service's stop: then a no-op)

    def drain_poll(self) -> int:
        return len(self.active)

    def drain_cut(self, reason: str) -> int:
        left = list(self.active)
        for connection_id in left:
            self._close(connection_id, reason)
        return len(left)

    def _userauth(self, ssh: GatewayServerTransport) -> GatewayUserAuth:
        return GatewayUserAuth(ssh, self)

    def _now(self) -> float:
        """Every time the service reads: sessions' and certificates' validity, the
        audit's and the logs' times, recordings' days and clocks."""
        return float(self.reactor.seconds())

    # -- the Gate

    async def _session(self, sid: str) -> Session | None:
        return await self.authorize.session(sid, self._now())

    async def bound_session(self, key_fingerprint: str) -> Session | None:
        sid = await bound_session_id(self.records, key_fingerprint, self._now())
        return await self._session(sid) if sid else None

    async def start_sign_in(self, ssh: GatewayServerTransport, target: LoginTarget,
                            key_fingerprint: str) -> tuple[str, str]:
        return await self.sign_ins.start(ssh.client_ip, target.route, target.login,
                                         key_fingerprint)

    def end_sign_in(self, ssh: GatewayServerTransport, ticket: str, confirmed: bool
                    ) -> None:
        self.sign_ins.end(ssh, ticket, confirmed)

    async def wait_sign_in(self, ssh: GatewayServerTransport, ticket: str
                           ) -> Session | None:
        session_id = await self.sign_ins.wait(ssh, ticket)
        return await self._session(session_id) if session_id else None

    async def admit(self, ssh: GatewayServerTransport, target: LoginTarget, session: Session,
                    key_fingerprint: str) -> RelayedConnection | JumpConnection:
        """decide → provision (certificate, pin) → dial → register; a refusal at any
        step is logged there and raised as ``Refused``."""
        decided = self.decide(ssh, target, session)
        if isinstance(decided, JumpHost):
            return self._jump(ssh, target, session, decided.person)
        provision = await self.provision(decided, session)
        upstream = await self.dial(ssh, decided, provision)
        return self.register(ssh, decided, session, provision, upstream, key_fingerprint)

    def decide(self, ssh: GatewayServerTransport, target: LoginTarget, session: Session
               ) -> Admission | JumpHost:
        """The route's decision (audited) and the recording rule, for a login (the one
        the policy gives when the user name names none); a user name that names no route
        is a jump host."""
        caller = self.authorize.caller(session)
        person = caller.who or who(session)
        route = self.routes.get(target.route)
        if route is None and not target.login and not ssh.jump_route:
            return JumpHost(person)
        if route is None or route.ssh is None:
            self._log_refusal(ssh, target, person, "no-such-route")
            raise Refused(f"signed in as {person}; there is no SSH route {target.route}")
        now = self._now()
        if not target.login:
            login, how = self.authorize.default_login(route, target.route, caller,
                                                      ssh.client_ip, now)
            if not login:
                self._log_refusal(ssh, target, person, "no-login")
                raise Refused(how)
            target = LoginTarget(login, target.route)  # the one login the policy gives them
        decision = self.authorize.login(route, target.route, target.login, caller,
                                        ssh.client_ip, now)
        if not decision.allowed:
            self._log_refusal(ssh, target, person, decision.reason)
            raise Refused(decision.message)
        if route.ssh.recording_required and not self._records(route):
            self._log_refusal(ssh, target, person, "recording-unavailable")
            raise Refused(f"signed in as {person}; route {target.route} requires a "
                          "recording and the gateway records none (ssh_recording_dir, "
                          "ssh_recording)")
        return Admission(route, route.ssh, target, person, decision.reason)

    async def provision(self, admission: Admission, session: Session) -> Provision:
        """The certificate for the login (valid from the service's clock), and for a
        trust-on-first-use route the pin to compare with or the right to pin."""
        server = admission.server
        key_id = f"{admission.person} session:" \
                 f"{hashlib.sha256(session.id.encode()).hexdigest()[:16]}"
        issued = issue(self.ca, admission.target.login, key_id, server.certificate_ttl,
                       self._now(), port_forwarding=server.allow_port_forwarding)
        held = None if server.host_keys else await pins.claim(
            self.records, server.name, secrets.token_hex(8),
            lambda seconds: deferLater(self.reactor, seconds))
        return Provision(issued, held)

    async def dial(self, ssh: GatewayServerTransport, admission: Admission,
                   provision: Provision) -> UpstreamConnection:
        """The server, logged in with the certificate; a server that cannot be reached
        or refuses is ``Refused`` (and a right to pin it never used is given back)."""
        server = admission.server
        try:
            return await self.connect(
                self.reactor, server.host, server.port, admission.target.login,
                provision.issued, self._host_key_check(admission.route, provision.held),
                host_key_algorithms(server.host_keys), revoked=server.revoked,
                route=server.name)
        except UpstreamFailed as failed:
            held = provision.held
            if held is not None and held.may_pin:  # (never met a key)
                ensureDeferred(pins.give_up(self.records, held))
            self._log_refusal(ssh, admission.target, admission.person,
                              f"upstream: {failed}")
            raise Refused(f"signed in as {admission.person}; route "
                          f"{admission.target.route}: {failed}") from None

    def register(self, ssh: GatewayServerTransport, admission: Admission, session: Session,
                 provision: Provision, upstream: UpstreamConnection, key_fingerprint: str
                 ) -> RelayedConnection:
        """The relay between the person and the server, among the open connections
        (decided again every ``RECHECK_SECONDS``), ended with either side."""
        route, server, target = admission.route, admission.server, admission.target
        connection_id = secrets.token_hex(8)
        ctx = Context(connection_id=connection_id, route=target.route, login=target.login,
                      user=admission.person, client=ssh.client_ip,
                      allow_port_forwarding=server.allow_port_forwarding,
                      recordings=lambda title, w, h, term: self._recording(
                          route, connection_id, ctx, title, w, h, term),
                      exec_records=lambda: self._record_file(
                          route, connection_id, ctx, ".exec.json", whole=True),
                      recording_required=server.recording_required, clock=self._now)
        relay = RelayedConnection(upstream, ctx)
        serial = provision.issued.serial
        self.active[connection_id] = Active(ssh, relay, session.id, target, self._now(),
                                            serial, admission.reason)
        self._watch(connection_id)
        CONNECTIONS.labels("allowed").inc()
        OPEN.inc()
        ssh.on_lost = lambda: self._ended(connection_id)
        if ssh.lost:  # gone while the server was being reached
            self._ended(connection_id)
        upstream.lost = lambda: self._close(connection_id, "the server closed the connection")
        log.info("ssh: {user} logged in as {login} on route {route}", user=admission.person,
                 login=target.login, route=target.route, client=ssh.client_ip,
                 decision="allowed", reason=admission.reason, connection=connection_id,
                 certificate_serial=serial, key=key_fingerprint)
        return relay

    def _jump(self, ssh: GatewayServerTransport, target: LoginTarget, session: Session,
              person: str) -> JumpConnection:
        """A user name that names no route: the connection of a jump host (``ssh -J``),
        whose channels to route names carry connections the gateway terminates."""
        connection_id = secrets.token_hex(8)

        def inner(route: str) -> GatewayServerTransport | None:
            built = self.factory.buildProtocol(ssh.transport.getPeer()
                                               if ssh.transport else None)
            if not isinstance(built, GatewayServerTransport):
                return None  # past the cap, or the address is penalised meanwhile
            built.jump_route = route
            return built

        self.active[connection_id] = Active(ssh, None, session.id, target, self._now(), 0,
                                            "jump")
        self._watch(connection_id)
        OPEN.inc()
        ssh.on_lost = lambda: self._ended(connection_id)
        log.info("ssh: {user} connected as a jump host", user=person, client=ssh.client_ip,
                 connection=connection_id, decision="allowed", reason="jump")
        return JumpConnection(lambda: set(self.routes), inner, target.route)

    def _log_refusal(self, ssh: GatewayServerTransport, target: LoginTarget, person: str,
                     reason: str) -> None:
        CONNECTIONS.labels("denied").inc()
        log.info("ssh: {user} refused as {login} on route {route}: {reason}", user=person,
                 login=target.login, route=target.route, client=ssh.client_ip,
                 decision="denied", reason=reason)

    def _host_key_check(self, route: Route, held: pins.Claim | None) -> HostKeyCheck:
        """The server's key against the route's keys, or its pin (``held``: read
        before connecting, since the key exchange cannot wait for the databroker); a
        host certificate's CA against the route's CAs. A route's CAs and host keys are
        kept apart: a CA is never accepted as a host key nor a host key as a CA."""
        ssh_route = route.ssh
        assert ssh_route is not None
        name = ssh_route.name
        plain, cas = trusted_blobs(ssh_route.host_keys)

        def check(blob: bytes, as_authority: bool) -> bool:
            if as_authority:
                if blob in cas:
                    return True
                log.error("ssh: route {route}: the host certificate's CA {shown} is not "
                          "one route {route} trusts ({expected}); refused", route=name,
                          shown=fingerprint(blob),
                          expected=", ".join(fingerprint(b) for b in cas) or "no host CA")
                return False
            trusted: tuple[bytes, ...]
            if ssh_route.host_keys:
                trusted = plain
            elif held is not None and held.may_pin:
                held.may_pin = False
                ensureDeferred(pins.pin(self.records, held, blob)).addErrback(
                    lambda failure: log.failure("ssh: route {route}: pinning the server's "
                                                "host key failed", failure, route=name))
                log.warn("ssh: route {route}: pinned the server's host key {shown} "
                         "(trust on first use)", route=name, shown=fingerprint(blob))
                return True
            elif held is not None and held.pinned is not None:
                trusted = (held.pinned,)
            else:
                log.error("ssh: route {route}: another connection is pinning the server's "
                          "host key (trust on first use) and its pin did not appear; "
                          "refused {shown}", route=name, shown=fingerprint(blob))
                return False
            if blob in trusted:
                return True
            log.error("ssh: route {route}: the server's host key {shown} is not the trusted "
                      "{expected}; refused", route=name, shown=fingerprint(blob),
                      expected=", ".join(fingerprint(b) for b in trusted)
                      or "none (the route trusts host certificates only)")
            return False
        return check

    def _records(self, route: Route) -> bool:
        assert route.ssh is not None
        return bool(self.snapshot.options.ssh_recording_dir) and route.ssh.recording is not False

    def _record_path(self, route: Route, connection_id: str, ctx: Context,
                     suffix: str) -> str:
        """Where the connection's next record goes ("": the route records nothing)."""
        directory = self.snapshot.options.ssh_recording_dir
        if not self._records(route):
            return ""
        day = time.strftime("%Y-%m-%d", time.gmtime(self._now()))
        return os.path.join(directory, day,
                            f"{connection_id}-{len(ctx.recording_files)}{suffix}")

    def _record_file(self, route: Route, connection_id: str, ctx: Context,
                     suffix: str, whole: bool = False) -> RecordFile | None:
        path = self._record_path(route, connection_id, ctx, suffix)
        if not path:
            return None
        return self.recorder.open(path, lambda reason: self._recording_failed(
            route, connection_id, reason), whole=whole)

    def _recording(self, route: Route, connection_id: str, ctx: Context, title: str,
                   width: int, height: int, term: str) -> Recording | None:
        file = self._record_file(route, connection_id, ctx, ".cast")
        if file is None:
            return None
        assert route.ssh is not None
        return Recording(file, Cast(width, height, term, self._now(), title,
                                    route.ssh.record_input))

    def _recording_failed(self, route: Route, connection_id: str, reason: str) -> None:
        """A recording that cannot be written: the session goes on unrecorded, or with
        ``ssh_recording_required`` the connection is closed."""
        assert route.ssh is not None
        active = self.active.get(connection_id)
        if active is not None and active.relay is not None:
            active.relay.ctx.recording_errors.append(reason)
        required = route.ssh.recording_required
        log.error("ssh: recording of connection {connection} on route {route} failed: "
                  "{reason}; {consequence}", connection=connection_id,
                  route=route.ssh.name, reason=reason,
                  consequence="closing the connection (ssh_recording_required)" if required
                  else "the session goes on unrecorded")
        if required:
            self._close(connection_id, f"route {route.ssh.name} requires a recording of "
                                       "the session and it cannot be written; closing")

    # -- the end, and continuous authorization

    def _watch(self, connection_id: str) -> None:
        """Closed at once when its session ends anywhere (the databroker's change
        stream tells this process's registry), not at its next recheck."""
        active = self.active[connection_id]
        active.unwatch = self.live.add(
            active.session_id, lambda reason: self._close(connection_id, reason))

    def _ended(self, connection_id: str) -> None:
        active = self.active.pop(connection_id, None)
        if active is None:
            return
        if active.unwatch is not None:
            active.unwatch()
        OPEN.dec()
        if active.relay is None:
            log.info("ssh: jump connection of {user} ended", connection=connection_id,
                     client=active.ssh.client_ip, reason=active.reason,
                     duration=round(self._now() - active.started, 3),
                     ended=active.ended or "closed")
            return
        ctx = active.relay.ctx
        BYTES.labels("in").inc(ctx.bytes_in)
        BYTES.labels("out").inc(ctx.bytes_out)
        log.info("ssh: connection of {user} as {login} on route {route} ended",
                 user=ctx.user, login=ctx.login, route=ctx.route, client=ctx.client,
                 connection=connection_id, decision="allowed", reason=active.reason,
                 certificate_serial=active.serial, bytes_in=ctx.bytes_in,
                 bytes_out=ctx.bytes_out, channels=ctx.channels,
                 duration=round(self._now() - active.started, 3),
                 recordings=ctx.recording_files, recording_errors=ctx.recording_errors,
                 ended=active.ended or "closed")

    def _close(self, connection_id: str, message: str) -> None:
        active = self.active.get(connection_id)
        if active is None or active.ended:
            return
        active.ended = message
        if active.relay is not None:
            active.relay.say(message)
        disconnect(active.ssh, transport.DISCONNECT_BY_APPLICATION, message)

    def _recheck_all(self) -> None:
        for connection_id, active in list(self.active.items()):
            if not active.checking and not active.ended:
                active.checking = True
                ensureDeferred(self._checked(connection_id, active))

    async def _checked(self, connection_id: str, active: Active) -> None:
        try:
            await self._recheck(connection_id, active)
        except Exception:
            log.failure("ssh: recheck of connection {connection} failed",
                        connection=connection_id)
        finally:
            active.checking = False

    async def _recheck(self, connection_id: str, active: Active) -> None:
        now = self._now()
        session, ended = await self.authorize.in_force(active.session_id, now)
        if session is None:
            self._close(connection_id, ended)
            return
        if active.relay is None:
            return  # a jump host: each inner connection is decided for its route
        route = self.routes.get(active.target.route)
        if route is None:
            self._close(connection_id, f"route {active.target.route} was removed")
            return
        decision = self.authorize.recheck(route, active.target.route, active.target.login,
                                          session, active.ssh.client_ip, now, connection_id)
        if not decision.allowed:
            log.info("ssh: {user} no longer allowed as {login} on route {route}: {reason}",
                     user=self.authorize.caller(session).who, login=active.target.login,
                     route=active.target.route,
                     reason=decision.reason, connection=connection_id)
            self._close(connection_id, decision.message)
