"""One token refresh per session among processes sharing the store: two session stores
over one memory record store stand for two processes."""

from __future__ import annotations

from dataclasses import replace

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import Clock

from gateway.authenticate import refresh_lease
from gateway.authenticate.identity import Identity
from gateway.authenticate.oidc import Tokens
from gateway.authorize.assertion import AssertionSigner
from gateway.databroker.follower import ChangeFollower
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.session_records import RecordSessionStore
from gateway.sessions.model import Session
from tests.unit import test_identity


def two_processes() -> tuple[Clock, RecordSessionStore, RecordSessionStore]:
    clock = Clock()
    clock.advance(1000.0)
    records = MemoryRecordStore(clock.seconds)
    a = RecordSessionStore(records, ChangeFollower(clock, records), complete=False)
    b = RecordSessionStore(records, ChangeFollower(clock, records), complete=False)
    return clock, a, b


def session() -> Session:
    return Session(id="sid-1", user_id="u", email="e@x", issued_at=1.0, expires_at=9999.0,
                   access_token="at-1", refresh_token="rt-1", token_expires_at=1010.0)


def result_of(d: Deferred[object]) -> object:
    out: list[object] = []
    d.addBoth(out.append)
    assert out, "not finished"
    return out[0]


def test_lease_named_from_a_hash_per_refresh_token() -> None:
    s = session()
    key = refresh_lease.lease_key(s)
    assert s.id not in key and s.refresh_token not in key
    assert refresh_lease.lease_key(replace(s, refresh_token="rt-2")) != key
    assert refresh_lease.lease_key(replace(s, access_token="other")) == key


def test_one_process_gets_the_lease_until_it_lapses() -> None:
    clock, a, b = two_processes()
    s = session()
    assert result_of(ensureDeferred(refresh_lease.claim(a, s))) is True
    assert result_of(ensureDeferred(refresh_lease.claim(b, s))) is False
    assert result_of(ensureDeferred(refresh_lease.claim(a, s))) is False
    # the next refresh token has a lease of its own
    assert result_of(ensureDeferred(refresh_lease.claim(b, replace(s, refresh_token="rt-2"))))
    clock.advance(refresh_lease.LEASE_SECONDS - 0.5)
    assert result_of(ensureDeferred(refresh_lease.claim(b, s))) is False
    clock.advance(1.0)  # the holder died: the lease lapsed
    assert result_of(ensureDeferred(refresh_lease.claim(b, s))) is True


def test_waiter_gets_the_holders_refreshed_session() -> None:
    clock, a, b = two_processes()
    s = session()
    a.put(s)
    waiting = ensureDeferred(refresh_lease.wait_for_refresh(b, s, clock))
    clock.advance(refresh_lease.POLL_SECONDS)
    assert not waiting.called
    fresh = replace(s, access_token="at-2", refresh_token="rt-2", token_expires_at=4600.0)
    a.put(fresh)
    clock.advance(refresh_lease.POLL_SECONDS)
    assert result_of(waiting) == fresh


def test_waiter_sees_the_session_ended_when_the_holders_refresh_failed() -> None:
    clock, a, b = two_processes()
    s = session()
    a.put(s)
    waiting = ensureDeferred(refresh_lease.wait_for_refresh(b, s, clock))
    a.delete(s.id)
    clock.advance(refresh_lease.POLL_SECONDS)
    assert result_of(waiting) is None


def test_waiter_goes_on_with_its_session_when_the_wait_is_over() -> None:
    clock, a, b = two_processes()
    s = session()
    a.put(s)
    waiting = ensureDeferred(refresh_lease.wait_for_refresh(b, s, clock))
    steps = int(refresh_lease.WAIT_SECONDS / refresh_lease.POLL_SECONDS)
    clock.pump([refresh_lease.POLL_SECONDS] * (steps - 5))
    assert not waiting.called  # still waiting shortly before the bound
    clock.pump([refresh_lease.POLL_SECONDS] * 10)
    assert result_of(waiting) == s
    assert not clock.getDelayedCalls()


class CountingProvider:
    """The provider's token endpoint as the two processes meet it: refreshes counted,
    each answered when the test says."""

    def __init__(self) -> None:
        self.refreshes: list[tuple[str, Deferred[Tokens]]] = []

    def refresh(self, refresh_token: str) -> Deferred[Tokens]:
        d: Deferred[Tokens] = Deferred()
        self.refreshes.append((refresh_token, d))
        return d


def identity_over(store: RecordSessionStore, clock: Clock,
                  provider: CountingProvider) -> Identity:
    snap = test_identity.snapshot()
    identity = Identity(clock, snap, store, AssertionSigner(None, "ES256", "auth.example",
                                                            clock=clock.seconds),
                        clock.seconds)
    identity.clients.clients["default"] = provider  # type: ignore[assignment]
    return identity


def test_two_processes_refresh_a_session_once() -> None:
    clock, a, b = two_processes()
    provider = CountingProvider()
    first, second = identity_over(a, clock, provider), identity_over(b, clock, provider)
    s = session()
    a.put(s)
    in_a = ensureDeferred(first.refresh(s))
    in_b = ensureDeferred(second.refresh(s))
    again_in_b = ensureDeferred(second.refresh(s))  # shared in process too
    assert [token for token, _ in provider.refreshes] == ["rt-1"]
    provider.refreshes[0][1].callback(Tokens("at-2", "", "rt-2", 3600.0, {}))
    clock.advance(refresh_lease.POLL_SECONDS)
    fresh = result_of(in_a)
    assert isinstance(fresh, Session) and fresh.refresh_token == "rt-2"
    assert result_of(in_b) == fresh and result_of(again_in_b) == fresh
    assert len(provider.refreshes) == 1


def test_one_process_store_takes_no_lease() -> None:
    clock = Clock()
    records = MemoryRecordStore(clock.seconds)
    store = RecordSessionStore(records, ChangeFollower(clock, records), complete=True)
    provider = CountingProvider()
    s = session()
    store.put(s)
    refreshed = ensureDeferred(identity_over(store, clock, provider).refresh(s))
    provider.refreshes[0][1].callback(Tokens("at-2", "", "rt-2", 3600.0, {}))
    assert isinstance(result_of(refreshed), Session)
    assert records._leases == {}
