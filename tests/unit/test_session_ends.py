"""Ending sessions from outside (issue 42): the session index (bounded, cleaned,
updated under a lease), which sessions a logout token names, the registry of live
connections and the databroker's change stream driving it, the back-channel logout
endpoint over the memory store, and a directory that stops listing a user."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import partial
from types import MappingProxyType
from typing import Any
from urllib.parse import urlencode

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from twisted.internet import defer
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from gateway.authenticate.endpoints import Endpoints
from gateway.authenticate.identity import Identity
from gateway.authenticate.logout_token import EVENT
from gateway.authenticate.targets import BACKCHANNEL_LOGOUT
from gateway.authorize.assertion import AssertionSigner
from gateway.authorize.hook import Reply, RequestInfo
from gateway.databroker import session_index
from gateway.databroker.broker import Databroker
from gateway.databroker.directory_records import DirectorySync
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import SESSION_INDEX, StorageUnavailable
from gateway.databroker.session_ends import named_by_logout
from gateway.databroker.session_index import (
    LEASE_WAIT,
    Entry,
    IndexFull,
    SessionIndex,
    email_key,
    keys_of,
    sid_key,
    user_key,
    with_entry,
)
from gateway.databroker.session_records import from_json, to_json
from gateway.directory.model import Directory, DirectoryUser
from gateway.observability.metrics import REGISTRY
from gateway.sessions.live import LiveConnections
from gateway.sessions.model import Session
from gateway.sessions.sealed import b64url as b64

from .config.helpers import IDENTITY, base_config, load
from .test_logout_token import provider_with

NOW = 1_800_000_000.0
ISSUER = "https://idp.example.com"
AUTH = "auth.test"


def result(d: Deferred[Any]) -> Any:
    out: list[Any] = []
    d.addBoth(out.append)
    assert out, "the Deferred has not fired"
    if hasattr(out[0], "raiseException"):
        out[0].raiseException()
    return out[0]


def person(sid: str, user: str = "alice", idp_sid: str = "op-1", issued: float = NOW - 10,
           issuer: str = ISSUER, email: str = "alice@example.com",
           provider: str = "default") -> Session:
    return Session(id=sid, user_id=user, email=email, issued_at=issued,
                   expires_at=NOW + 3600, idp_issuer=issuer, idp_sid=idp_sid,
                   provider=provider)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


class IndexTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.store = MemoryRecordStore(self.clock.seconds)
        self.index = SessionIndex(self.store, self.clock, self.clock.seconds)

    def test_keys_and_entries(self) -> None:
        """A session is indexed under its provider session, its user and its address;
        a session stored before sid was recorded has only the last two."""
        alice = person("g-1")
        self.assertEqual(len(keys_of(alice)), 3)
        self.assertEqual(len(keys_of(person("g-0", idp_sid="", issuer=""))), 2)
        result(self.index.add(alice))
        result(self.index.add(person("g-2", idp_sid="op-2")))
        self.assertEqual([e.session_id for e in result(self.index.entries(
            sid_key("default", ISSUER, "op-1")))], ["g-1"])
        self.assertEqual(sorted(e.session_id for e in result(self.index.entries(
            user_key("default", "alice")))), ["g-1", "g-2"])
        # neither a sid nor a user id is a record id
        ids = [r.id for r in result(self.store.query(SESSION_INDEX))]
        self.assertFalse([i for i in ids if "op-1" in i or "alice" in i], ids)

    def test_a_session_stored_before_sid_was_recorded_still_loads(self) -> None:
        """A record written by the version before (no idp_issuer, idp_sid) loads with
        both empty; the index keeps it under its user and address only."""
        old = {k: v for k, v in json.loads(to_json(person("g-0"))).items()
               if k not in ("idp_issuer", "idp_sid", "provider")}
        session = from_json(json.dumps(old).encode())
        self.assertEqual((session.idp_issuer, session.idp_sid), ("", ""))
        self.assertEqual(keys_of(session), [user_key("default", "alice"),
                                            email_key("default", "alice@example.com")])

    def test_expired_entries_go_and_the_record_expires_with_its_sessions(self) -> None:
        result(self.index.add(person("g-1")))
        self.clock.advance(3601)
        self.assertEqual(result(self.index.entries(user_key("default", "alice"))), [])
        result(self.store.sweep(self.clock.seconds()))
        self.assertEqual(result(self.store.query(SESSION_INDEX)), [])

    def test_the_bound_refuses_the_newest_and_ends_no_one(self) -> None:
        entries = [Entry(f"s{i}", NOW + 100 + i, NOW, ISSUER) for i in range(3)]
        self.assertIsNone(with_entry(entries, Entry("new", NOW + 500, NOW, ISSUER), NOW,
                                     limit=3))
        kept = with_entry(entries, Entry("s0", NOW + 900, NOW, ISSUER),
                          NOW + 100.5, limit=3)  # expired s0 dropped, replaced
        assert kept is not None
        self.assertEqual(sorted(e.session_id for e in kept), ["s0", "s1", "s2"])

    def test_keys_are_the_providers_and_only_a_vouched_for_address(self) -> None:
        """Found in review (issue 42): the index keyed sessions by the address as
        received (verified or not) and by the bare user id, across providers, and a
        key past its bound ended its oldest sessions: someone whose provider let them
        set ``email=victim`` signed in MAX_PER_KEY times and signed the victim out, and
        held the victim's key's lease. Now keys are per provider, an unverified address
        is no key, and a full key refuses the newest sign-in only."""
        self.patch(session_index, "MAX_PER_KEY", 2)
        victim = person("v-1")
        result(self.index.add(victim))
        unverified = MappingProxyType({"email": ("alice@example.com",),
                                       "email_verified": ("false",)})
        mallory = replace(person("m-1", user="mallory", idp_sid=""), claims=unverified)
        partner = person("p-1", idp_sid="", provider="partners")  # verified, same id
        self.assertEqual(len(keys_of(mallory)), 1)  # the user id only
        self.assertFalse(set(keys_of(partner)) & set(keys_of(victim)))
        for n in range(2):
            result(self.index.add(replace(mallory, id=f"m-{n}")))
            result(self.index.add(replace(partner, id=f"p-{n}")))
        for key in keys_of(victim):
            self.assertEqual([e.session_id for e in result(self.index.entries(key))],
                             ["v-1"])
        # the victim's own second session fits; a third is refused, the first stays
        result(self.index.add(person("v-2", idp_sid="")))
        self.failureResultOf(self.index.add(person("v-3", idp_sid="")), IndexFull)
        self.assertEqual(sorted(e.session_id for e in result(self.index.entries(
            user_key("default", "alice")))), ["v-1", "v-2"])

    def test_an_update_waits_for_the_key_held_elsewhere(self) -> None:
        """Another process updating the key holds its lease: this update waits rather
        than overwrite that one's entry."""
        key = user_key("default", "alice")
        self.assertTrue(result(self.store.lease(f"index:{key}", "other", 10.0)))
        d = self.index.add(person("g-1", idp_sid=""))
        self.clock.advance(LEASE_WAIT)
        self.assertEqual(result(self.index.entries(key)), [])
        result(self.store.release(f"index:{key}", "other"))
        self.clock.advance(LEASE_WAIT)
        result(d)
        self.assertEqual([e.session_id for e in result(self.index.entries(key))], ["g-1"])


class NamedByLogout(SynchronousTestCase):
    def test_table(self) -> None:
        ours = Entry("a", NOW + 10, NOW - 10, ISSUER)
        later = Entry("later", NOW + 10, NOW + 500, ISSUER)
        theirs = Entry("b", NOW + 10, NOW - 10, "https://other.example")
        cases = [
            ("sid", dict(sid="op-1", sub="", by_sid=[ours, later], by_user=[]), ["a"]),
            ("sid wins over sub", dict(sid="op-1", sub="alice", by_sid=[ours],
                                       by_user=[ours, theirs]), ["a"]),
            ("sub: this issuer's only", dict(sid="", sub="alice", by_sid=[],
                                             by_user=[ours, theirs, later]), ["a"]),
            ("nothing indexed", dict(sid="op-9", sub="", by_sid=[], by_user=[]), []),
        ]
        for case, given, wanted in cases:
            with self.subTest(case):
                self.assertEqual(named_by_logout(ISSUER, issued_by=NOW + 60, **given),
                                 wanted)


class LiveTests(SynchronousTestCase):
    def test_end_closes_each_once_and_forgets(self) -> None:
        live = LiveConnections()
        ended: list[str] = []
        live.add("s1", lambda why: ended.append("a:" + why))
        forget_b = live.add("s1", lambda why: ended.append("b:" + why))
        live.add("s2", lambda why: ended.append("c:" + why))
        forget_b()
        self.assertEqual(live.end("s1", "bye"), 1)
        self.assertEqual(live.end("s1", "bye"), 0)
        self.assertEqual(ended, ["a:bye"])
        self.assertEqual(len(live), 1)

    def test_a_failing_end_does_not_keep_the_others_open(self) -> None:
        live = LiveConnections()
        ended: list[str] = []

        def broken(why: str) -> None:
            raise RuntimeError("boom")
        live.add("s1", broken)
        live.add("s1", ended.append)
        self.assertEqual(live.end("s1", "bye"), 2)
        self.assertEqual(ended, ["bye"])
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)


class BrokerCase(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(NOW)
        self.snapshot = load(base_config(**IDENTITY))
        self.records = MemoryRecordStore(self.clock.seconds)
        self.broker = Databroker(self.clock, self.snapshot, store=self.records)
        self.broker.startService()
        self.clock.advance(0)  # the change stream's first poll: where it starts from
        self.addCleanup(self.broker.stopService)
        self.sessions = self.broker.sessions

    def sign_in(self, session: Session) -> None:
        result(self.sessions.put_confirmed(session))

    def watch(self, sid: str) -> list[str]:
        ended: list[str] = []
        self.broker.live.add(sid, ended.append)
        return ended


class ChangeStreamTests(BrokerCase):
    def test_a_deleted_session_closes_its_connections_at_once(self) -> None:
        """Any deletion (a sign-out here or elsewhere) reaches the registry through the
        change stream, without waiting for a recheck."""
        self.sign_in(person("g-1"))
        self.sign_in(person("g-2"))
        first, second = self.watch("g-1"), self.watch("g-2")
        self.sessions.delete("g-1")
        self.clock.advance(0)
        self.assertEqual(len(first), 1)
        self.assertEqual(second, [])
        self.assertIsNone(self.sessions.get("g-1"))

    def test_a_sign_in_the_index_cannot_take_fails(self) -> None:
        """A session no logout could find is not handed out: the sign-in fails and the
        session is gone."""
        self.records.lease = lambda *a: defer.fail(RuntimeError("down"))  # type: ignore
        with self.assertRaises(RuntimeError):
            self.sign_in(person("g-1"))
        self.assertIsNone(self.sessions.get("g-1"))


def post(body: bytes, *extra: tuple[bytes, bytes], method: bytes = b"POST",
         host: str = AUTH) -> RequestInfo:
    headers = [(b"content-type", b"application/x-www-form-urlencoded"), *extra]
    return RequestInfo(method, "https", host, BACKCHANNEL_LOGOUT, b"", headers, "192.0.2.9")


class EndpointTests(BrokerCase):
    def setUp(self) -> None:
        super().setUp()
        config = {**IDENTITY, "authenticate_service_url": f"https://{AUTH}",
                  "policy": [{"from": "https://app.test", "to": "http://127.0.0.1:9",
                              "allow_any_authenticated_user": True}]}
        snapshot = load(base_config(**config))
        signer = AssertionSigner(None, "ES256", AUTH)
        self.identity = Identity(self.clock, snapshot, self.sessions, signer,
                                 self.clock.seconds)
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        keys = {"k1": jwt.PyJWK({**public, "kid": "k1"})}
        self.identity.clients.clients["default"] = provider_with(keys, self.clock)
        self.endpoints = Endpoints(self.identity, snapshot.routes, self.records,
                                   self.broker.ends)

    def token(self, **claims: Any) -> str:
        body = {"iss": ISSUER, "aud": "gateway", "iat": NOW, "exp": NOW + 120,
                "jti": "jti-1", "sid": "op-1", "events": {EVENT: {}}, **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, self.key,
                          "RS256", headers={"kid": "k1", "typ": "logout+jwt"})

    def answer(self, request: RequestInfo, body: bytes) -> Reply:
        decision = self.endpoints.internal(request, body)
        if isinstance(decision, Deferred):
            decision = result(decision)
        assert isinstance(decision, Reply), decision
        return decision

    def logout(self, token: str, *extra: tuple[bytes, bytes]) -> Reply:
        body = urlencode({"logout_token": token}).encode()
        return self.answer(post(body, *extra), body)

    def error_of(self, reply: Reply) -> str:
        self.assertEqual(reply.status, 400, reply)
        self.assertIn((b"content-type", b"application/json"), reply.headers)
        return str(json.loads(reply.body)["error"])

    def test_a_provider_posting_with_nodes_fetch_is_no_browser(self) -> None:
        """Node's fetch (node-oidc-provider's) sends Sec-Fetch-Mode: cors, and no
        Sec-Fetch-Site, Origin or Cookie: a server, not a browser."""
        self.sign_in(person("g-1"))
        reply = self.logout(self.token(), (b"sec-fetch-mode", b"cors"),
                            (b"accept-language", b"*"), (b"user-agent", b""))
        self.assertEqual(reply.status, 200)
        self.assertIsNone(self.sessions.get("g-1"))

    def test_sid_ends_that_provider_session_everywhere(self) -> None:
        self.sign_in(person("g-1"))
        self.sign_in(person("g-2", idp_sid="op-1"))  # a second sign-in in the same one
        self.sign_in(person("g-3", idp_sid="op-2"))  # another provider session of hers
        watched = self.watch("g-1")
        before = sample("gateway_backchannel_logouts_total", result="ok")
        reply = self.logout(self.token())
        self.assertEqual(reply.status, 200)
        self.assertIn((b"cache-control", b"no-store"), reply.headers)
        self.assertFalse([h for h, _ in reply.headers if h in (b"location", b"set-cookie")])
        self.clock.advance(0)
        self.assertEqual(len(watched), 1)
        self.assertIsNone(self.sessions.get("g-1"))
        self.assertIsNone(self.sessions.get("g-2"))
        self.assertIsNotNone(self.sessions.get("g-3"))
        self.assertEqual(sample("gateway_backchannel_logouts_total", result="ok"), before + 1)

    def test_sub_ends_every_session_of_the_user_from_this_provider(self) -> None:
        self.sign_in(person("g-1"))
        self.sign_in(person("g-2", idp_sid="op-2"))
        self.sign_in(person("g-3", user="bob", idp_sid="op-3", email="bob@example.com"))
        self.assertEqual(self.logout(self.token(sid=None, sub="alice")).status, 200)
        self.assertIsNone(self.sessions.get("g-1"))
        self.assertIsNone(self.sessions.get("g-2"))
        self.assertIsNotNone(self.sessions.get("g-3"))

    def test_replay_refused(self) -> None:
        """The jti is spent in the store: the same token again is refused, and does not
        end the session signed in since."""
        self.sign_in(person("g-1"))
        token = self.token()
        self.assertEqual(self.logout(token).status, 200)
        self.sign_in(person("g-2"))
        before = sample("gateway_backchannel_logouts_total", result="replayed")
        self.assertEqual(self.error_of(self.logout(token)), "invalid_request")
        self.assertIsNotNone(self.sessions.get("g-2"))
        self.assertEqual(sample("gateway_backchannel_logouts_total", result="replayed"),
                         before + 1)

    def test_a_store_that_cannot_answer_leaves_the_token_for_a_retry(self) -> None:
        """The index cannot be read: 400 temporarily_unavailable, and the jti is not
        spent, so the provider's retry of the same token ends the session."""
        self.sign_in(person("g-1"))
        token = self.token(jti="retry-me")
        real_get = self.records.get

        def down(type: str, id: str) -> Deferred[Any]:
            if type == SESSION_INDEX:
                return defer.fail(StorageUnavailable("kvstore unavailable"))
            return real_get(type, id)
        self.records.get = down  # type: ignore[method-assign]
        reply = self.logout(token)
        self.assertEqual(json.loads(reply.body)["error"], "temporarily_unavailable")
        self.assertIsNotNone(self.sessions.get("g-1"))
        self.records.get = real_get  # type: ignore[method-assign]
        self.assertEqual(self.logout(token).status, 200)
        self.assertIsNone(self.sessions.get("g-1"))

    def test_sessions_signed_in_after_the_token_stay(self) -> None:
        self.sign_in(person("g-1", issued=NOW + 300))
        self.assertEqual(self.logout(self.token()).status, 200)
        self.assertIsNotNone(self.sessions.get("g-1"))

    def test_refusals(self) -> None:
        """A browser's request (whatever it carries), another method, another body
        type, no token, a token of another issuer, a bad claim: 400 (405) with a JSON
        error; nothing ends."""
        self.sign_in(person("g-1"))
        good = self.token(jti="unused")
        for case, extra in [("fetch metadata", (b"sec-fetch-site", b"same-origin")),
                            ("origin", (b"origin", b"https://evil.example")),
                            ("cookie", (b"cookie", b"_gateway=x"))]:
            with self.subTest(case):
                self.assertEqual(self.error_of(self.logout(good, extra)), "invalid_request")
        self.assertEqual(self.answer(post(b"", method=b"GET"), b"").status, 405)
        wrong_type = RequestInfo(b"POST", "https", AUTH, BACKCHANNEL_LOGOUT, b"",
                                 [(b"content-type", b"application/json")], "192.0.2.9")
        self.error_of(self.answer(wrong_type, b"logout_token=" + good.encode()))
        self.error_of(self.answer(post(b"nothing=here"), b"nothing=here"))
        self.error_of(self.logout("not-a-jwt"))
        head, body, sig = good.split(".")
        twice = b64(b'{"iss":"%s","iss":"%s"}' % (ISSUER.encode(), ISSUER.encode()))
        self.error_of(self.logout(f"{head}.{twice}.{sig}"))  # a member named twice
        self.error_of(self.logout(f"{head}.{body}.{sig}.x.y"))  # a JWE's shape
        self.error_of(self.logout(self.token(iss="https://other.example")))
        self.error_of(self.logout(self.token(nonce="n", jti="j2")))
        self.error_of(self.logout(self.token(events=None, jti="j3")))
        self.assertIsNotNone(self.sessions.get("g-1"))
        # (the same token, unused by the refusals, still works)
        self.assertEqual(self.logout(good).status, 200)

    def test_two_providers_keys_and_issuers_never_cross(self) -> None:
        """A second provider's logout ends its own sessions only; a token signed with
        one provider's key that names the other's issuer is refused (its key is looked
        up among the named issuer's keys only)."""
        partners = "https://partners.example.net"
        key_b = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = jwt.algorithms.RSAAlgorithm.to_jwk(key_b.public_key(), as_dict=True)
        self.identity.clients.clients["partners"] = provider_with(
            {"k1": jwt.PyJWK({**public, "kid": "k1"})}, self.clock, partners, "gw")
        self.sign_in(person("g-1"))  # the first provider's op-1
        self.sign_in(person("g-2", issuer=partners, provider="partners"))  # same sid
        body = {"iss": partners, "aud": "gw", "iat": NOW, "exp": NOW + 120, "jti": "b-1",
                "sid": "op-1", "events": {EVENT: {}}}
        header = {"kid": "k1", "typ": "logout+jwt"}
        forged = jwt.encode(body, self.key, "RS256", headers=header)  # A's key, B's iss
        self.error_of(self.logout(forged))
        self.error_of(self.logout(self.token(aud="gw", jti="a-2")))  # B's aud at A
        self.assertIsNotNone(self.sessions.get("g-1"))
        self.assertIsNotNone(self.sessions.get("g-2"))
        reply = self.logout(jwt.encode({**body, "jti": "b-2"}, key_b, "RS256",
                                       headers=header))
        self.assertEqual(reply.status, 200)
        self.assertIsNotNone(self.sessions.get("g-1"))
        self.assertIsNone(self.sessions.get("g-2"))

    def test_two_clients_at_one_issuer_each_get_their_logout(self) -> None:
        """Found in review (issue 42): the issuer picked one client (the last
        configured), so with staff and contractors clients at one provider the first
        client's logout tokens (its ``aud``) were refused and its sessions never ended.
        The token's ``aud`` now picks the client among those at its issuer."""
        keys = self.identity.clients.clients["default"]._keys
        self.identity.clients.clients["contractors"] = provider_with(
            keys, self.clock, ISSUER, "contractors-client")
        self.sign_in(person("g-1"))  # staff (default), op-1
        self.sign_in(person("g-2", provider="contractors", idp_sid="op-2"))
        self.assertEqual(self.logout(self.token()).status, 200)  # aud: gateway
        self.assertIsNone(self.sessions.get("g-1"))
        self.assertIsNotNone(self.sessions.get("g-2"))
        self.sign_in(person("g-3", idp_sid="op-2"))  # staff, same provider session
        reply = self.logout(self.token(aud=["contractors-client"], sid="op-2", jti="c-1"))
        self.assertEqual(reply.status, 200)
        self.assertIsNone(self.sessions.get("g-2"))
        self.assertIsNotNone(self.sessions.get("g-3"))  # its own client's token ends it
        self.assertEqual(self.error_of(self.logout(self.token(aud="stranger", jti="s-1"))),
                         "invalid_request")

    def test_only_on_the_authenticate_host(self) -> None:
        body = urlencode({"logout_token": self.token()}).encode()
        reply = self.answer(post(body, host="app.test"), body)
        self.assertNotEqual(reply.status, 200)


class DirectoryRemovalTests(BrokerCase):
    def test_a_user_the_directory_drops_loses_every_session(self) -> None:
        provider = _Provider(Directory((DirectoryUser("alice", "alice@example.com", "A",
                                                      ()),
                                        DirectoryUser("bob", "bob@example.com", "B", ())),
                                       ()))
        sync = DirectorySync(self.clock, self.records, provider, 600, 60,
                             removed=partial(self.broker._directory_removed, "default"))
        self.assertTrue(result(ensureDeferred(sync.run_once())))
        self.sign_in(person("g-1"))
        self.sign_in(person("g-2", user="other-sub", idp_sid="x",
                            email="alice@example.com"))  # matched by address
        self.sign_in(person("g-3", user="bob", idp_sid="y", email="bob@example.com"))
        self.sign_in(person("g-4", idp_sid="z", provider="partners"))
        watched = self.watch("g-1")
        provider.directory = Directory((DirectoryUser("bob", "bob@example.com", "B", ()),),
                                       ())
        self.assertTrue(result(ensureDeferred(sync.run_once())))
        self.clock.advance(0)
        self.assertIsNone(self.sessions.get("g-1"))
        self.assertIsNone(self.sessions.get("g-2"))
        self.assertIsNotNone(self.sessions.get("g-3"))
        self.assertEqual(len(watched), 1)
        # found in review (issue 42): the directory's removals ended every provider's
        # sessions with that user id or address; alice's id and address at another
        # provider are someone else's, and stay when the directory drops alice
        self.assertIsNotNone(self.sessions.get("g-4"))
        # an empty answer (a base or filter mistake) ends nobody's sessions
        provider.directory = Directory((), ())
        self.assertTrue(result(ensureDeferred(sync.run_once())))
        self.assertIsNotNone(self.sessions.get("g-3"))


class _Provider:
    name = "fake"

    def __init__(self, directory: Directory) -> None:
        self.directory = directory

    def fetch(self) -> Deferred[Directory]:
        return defer.succeed(self.directory)
