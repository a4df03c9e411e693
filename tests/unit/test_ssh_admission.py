"""The SSH service's admission, step by step (issue 40, item 4): ``decide`` (the route's
decision and the recording rule), ``provision`` (the certificate, the pin claim),
``dial`` (the server, through an injected connector) and ``register`` (the relay among
the open connections), each alone, on a ``MemoryReactorClock`` that is the service's one
clock: sessions' and certificates' validity follow it, not the wall clock."""

from __future__ import annotations

import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.caller import caller_of
from gateway.authorize.ssh_logins import AuthorizeSsh
from gateway.config.running import ConfigSource
from gateway.config.snapshot import load_snapshot
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.sessions.model import Session
from gateway.ssh import pins
from gateway.ssh.auth import Refused
from gateway.ssh.channel_relay import RelayedConnection
from gateway.ssh.service import Admission, JumpHost, Provision, SshService
from gateway.ssh.upstream import UpstreamConnection, UpstreamFailed
from gateway.ssh.user_names import LoginTarget
from tests.support.ssh_fakes import FakeSSH

from .test_authorize_ssh import MemorySessions

NOW = 5_000_000.0  # far from the wall clock: a time.time() anywhere shows
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _openssh_key() -> bytes:
    return bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption()))


def _done(d: Any) -> Any:
    """The result of an already-fired coroutine or Deferred (the failure raised)."""
    out: list[Any] = []
    ensureDeferred(d).addBoth(out.append)
    assert out, "not synchronous"
    result = out[0]
    if hasattr(result, "raiseException"):
        result.raiseException()
    return result


class Service:
    """A real ``SshService`` on a memory reactor and store; the decider is the real
    policy over the session as given."""

    def __init__(self, **settings: Any) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ssh-admission-"))
        (self.dir / "host_key").write_bytes(_openssh_key())
        (self.dir / "ca_key").write_bytes(_openssh_key())
        routes = [
            {"from": "ssh://db", "to": "ssh://127.0.0.1:2200",
             "ssh_upstream_host_keys": [f"[127.0.0.1]:2200 {HOST_KEY}"],
             "ssh_certificate_ttl": "10m", "allowed_users": ["alice@example.com"]},
            {"from": "ssh://tofu", "to": "ssh://127.0.0.1:2201",
             "ssh_upstream_host_key_tofu": True, "allowed_users": ["alice@example.com"]},
            {"from": "ssh://kept", "to": "ssh://127.0.0.1:2202",
             "ssh_upstream_host_key_tofu": True, "ssh_recording_required": True,
             "allowed_users": ["alice@example.com"]}]
        config = {
            "insecure_server": True, "address": "127.0.0.1:8080",
            "authenticate_service_url": "http://authenticate.localhost:8080",
            "idp_provider": "oidc", "idp_provider_url": "http://127.0.0.1:9000",
            "idp_client_id": "gateway", "idp_client_secret": "secret",
            "ssh_address": "127.0.0.1:2222", "ssh_host_key_files": ["host_key"],
            "ssh_user_ca_key_file": "ca_key", **settings, "policy": routes}
        path = self.dir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        snapshot = load_snapshot(str(path), {})
        self.reactor = MemoryReactorClock()
        self.reactor.advance(NOW)
        self.records = MemoryRecordStore(self.reactor.seconds)
        decider = SimpleNamespace(caller=lambda s: caller_of(
            s, allow_unverified_email=True, groups_available=True))
        holder: Any = SimpleNamespace(identity=SimpleNamespace(
            decider=decider, auth_origin="https://authenticate.example"), store=None,
            authorize_ssh=AuthorizeSsh(lambda: decider, MemorySessions()))
        source = ConfigSource(str(path), snapshot, self.reactor, poll_interval=0)
        changes = ChangeFollower(self.reactor, self.records)
        self.service = SshService(source, self.reactor, holder, self.records, changes)

    def session(self, email: str = "alice@example.com", left: float = 3600.0) -> Session:
        now = self.reactor.seconds()
        return Session("sid-1", "user-1", email, now - 10, now + left)

    def admission(self, route: str = "db", login: str = "alice") -> Admission:
        decided = self.service.decide(FakeSSH(), LoginTarget(login, route),  # type: ignore[arg-type]
                                      self.session())
        assert isinstance(decided, Admission)
        return decided


class DecideTests(SynchronousTestCase):
    def test_an_allowed_login(self) -> None:
        s = Service()
        decided = s.admission()
        self.assertEqual((decided.target, decided.person, decided.server.name),
                         (LoginTarget("alice", "db"), "alice@example.com", "db"))
        self.assertIn("allowed_users", decided.reason)

    def test_a_refusal_is_the_line_the_person_reads(self) -> None:
        s = Service()
        with self.assertRaises(Refused) as refused:
            s.service.decide(FakeSSH(), LoginTarget("bob", "db"),  # type: ignore[arg-type]
                             s.session("bob@example.com"))
        self.assertIn("signed in as bob@example.com; route db", str(refused.exception))

    def test_no_such_route_and_a_jump_host(self) -> None:
        s = Service()
        with self.assertRaises(Refused) as refused:
            s.service.decide(FakeSSH(), LoginTarget("alice", "nowhere"),  # type: ignore[arg-type]
                             s.session())
        self.assertIn("there is no SSH route nowhere", str(refused.exception))
        jump = s.service.decide(FakeSSH(), LoginTarget("", "nowhere"),  # type: ignore[arg-type]
                                s.session())
        self.assertEqual(jump, JumpHost("alice@example.com"))

    def test_a_session_ends_by_the_services_clock(self) -> None:
        """Valid for 60 s of the service's clock, then refused (the wall clock, years
        past ``NOW``, would have refused it at once)."""
        s = Service()
        session = s.session(left=60)
        ssh: Any = FakeSSH()
        self.assertIsInstance(s.service.decide(ssh, LoginTarget("alice", "db"), session),
                              Admission)
        s.reactor.advance(61)
        with self.assertRaises(Refused) as refused:
            s.service.decide(ssh, LoginTarget("alice", "db"), session)
        self.assertIn("your session has ended", str(refused.exception))

    def test_a_route_that_requires_a_recording_the_gateway_cannot_make(self) -> None:
        s = Service()  # no ssh_recording_dir
        with self.assertRaises(Refused) as refused:
            s.admission("kept")
        self.assertIn("requires a recording", str(refused.exception))


class ProvisionTests(SynchronousTestCase):
    def test_the_certificate_is_valid_from_the_services_clock(self) -> None:
        s = Service()
        provision = _done(s.service.provision(s.admission(), s.session()))
        self.assertEqual(provision.issued.valid_before, int(NOW + 600))
        self.assertIsNone(provision.held)  # the route lists its host keys

    def test_a_trust_on_first_use_route_claims_its_pin(self) -> None:
        s = Service()
        provision = _done(s.service.provision(s.admission("tofu"), s.session()))
        held = provision.held
        assert held is not None
        self.assertEqual((held.route, held.may_pin, held.pinned), ("tofu", True, None))
        # the lease is held: a second connection may not pin meanwhile
        self.assertFalse(_done(s.records.lease(pins.lease_name("tofu"), "other", 30)))


class DialTests(SynchronousTestCase):
    def test_the_server_is_reached_with_the_certificate_and_the_route_keys(self) -> None:
        s = Service()
        admission = s.admission()
        provision = _done(s.service.provision(admission, s.session()))
        calls: list[tuple[Any, ...]] = []
        upstream = UpstreamConnection(Deferred())

        async def connect(reactor: Any, host: str, port: int, login: str, issued: Any,
                          check: Any, algs: list[bytes], **named: Any) -> Any:
            calls.append((reactor, host, port, login, issued, algs, named["route"]))
            return upstream

        s.service.connect = connect
        got = _done(s.service.dial(FakeSSH(), admission, provision))  # type: ignore[arg-type]
        self.assertIs(got, upstream)
        self.assertEqual(calls, [(s.reactor, "127.0.0.1", 2200, "alice", provision.issued,
                                  [b"ssh-ed25519"], "db")])

    def test_a_server_out_of_reach_is_a_refusal_and_gives_the_pin_back(self) -> None:
        s = Service()
        admission = s.admission("tofu")
        provision = _done(s.service.provision(admission, s.session()))

        async def connect(*args: Any, **named: Any) -> Any:
            raise UpstreamFailed("the server cannot be reached (ConnectionRefusedError)")

        s.service.connect = connect
        with self.assertRaises(Refused) as refused:
            _done(s.service.dial(FakeSSH(), admission, provision))  # type: ignore[arg-type]
        self.assertEqual(str(refused.exception),
                         "signed in as alice@example.com; route tofu: the server cannot "
                         "be reached (ConnectionRefusedError)")
        self.assertTrue(_done(s.records.lease(pins.lease_name("tofu"), "other", 30)))


class RegisterTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.s = Service()
        admission = self.s.admission()
        provision: Provision = _done(self.s.service.provision(admission, self.s.session()))
        self.serial = provision.issued.serial
        self.upstream = UpstreamConnection(Deferred())
        self.ssh = FakeSSH()
        self.relay = self.s.service.register(
            self.ssh, admission, self.s.session(), provision,  # type: ignore[arg-type]
            self.upstream, "SHA256:key")

    def test_the_relay_is_among_the_open_connections(self) -> None:
        self.assertIsInstance(self.relay, RelayedConnection)
        (active,) = self.s.service.active.values()
        self.assertEqual((active.session_id, active.target, active.serial, active.started),
                         ("sid-1", LoginTarget("alice", "db"), self.serial, NOW))
        self.s.reactor.advance(7)
        self.assertEqual(self.relay.ctx.clock(), NOW + 7)  # recordings' clock too

    def test_the_persons_side_ending_ends_it(self) -> None:
        self.ssh.on_lost()
        self.assertEqual(self.s.service.active, {})

    def test_the_servers_side_ending_closes_the_persons(self) -> None:
        assert self.upstream.lost is not None
        self.upstream.lost()
        assert self.ssh.disconnected is not None
        self.assertIn(b"the server closed the connection", self.ssh.disconnected[1])

    def test_the_session_ending_closes_it_at_once(self) -> None:
        """Issue 42: listed under its session in the registry of live connections, it
        is closed when the session ends, not at the next recheck; and forgotten."""
        self.assertEqual(self.s.service.live.watched("sid-1"), 1)
        self.assertEqual(self.s.service.live.end("sid-1"), 1)  # no clock advance
        assert self.ssh.disconnected is not None
        self.assertIn(b"your session has ended", self.ssh.disconnected[1])
        self.ssh.on_lost()
        self.assertEqual(len(self.s.service.live), 0)

    def test_a_closed_connection_leaves_the_registry(self) -> None:
        self.ssh.on_lost()
        self.assertEqual(len(self.s.service.live), 0)

    def test_a_person_gone_while_the_server_was_reached(self) -> None:
        s = Service()
        admission = s.admission()
        provision = _done(s.service.provision(admission, s.session()))
        ssh = FakeSSH(lost=True)
        s.service.register(ssh, admission, s.session(), provision,  # type: ignore[arg-type]
                           UpstreamConnection(Deferred()), "SHA256:key")
        self.assertEqual(s.service.active, {})


class AdmitTests(SynchronousTestCase):
    def test_the_steps_in_order(self) -> None:
        s = Service()
        steps: list[str] = []
        service: Any = s.service
        decide, provision, dial, register = (service.decide, service.provision,
                                             service.dial, service.register)

        def step(name: str, real: Any) -> Any:
            def run(*args: Any) -> Any:
                steps.append(name)
                return real(*args)
            return run

        async def connect(*args: Any, **named: Any) -> Any:
            return UpstreamConnection(Deferred())

        service.connect = connect
        service.decide, service.provision = step("decide", decide), step("provision",
                                                                          provision)
        service.dial, service.register = step("dial", dial), step("register", register)
        relay = _done(s.service.admit(FakeSSH(), LoginTarget("alice", "db"),  # type: ignore[arg-type]
                                       s.session(), "SHA256:key"))
        self.assertIsInstance(relay, RelayedConnection)
        self.assertEqual(steps, ["decide", "provision", "dial", "register"])
