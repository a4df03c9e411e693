"""The sign-in state machine of ``gateway tcp``: cached token, 401/3xx -> sign in ->
exactly one retry, refused tokens forgotten, one sign-in shared by concurrent
connections, errors for everything else. Dial and sign-in are fakes fired by hand."""

from __future__ import annotations

from pathlib import Path

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.cli.tcp.messages import TunnelError
from gateway.cli.tcp.opener import TunnelOpener
from gateway.cli.tcp.options import Address, GatewayURL
from gateway.cli.tcp.wire import Refused

TUNNEL = "the tunnel"
DEST = Address("db.example.com", 5432)
GATEWAY = GatewayURL("https", "db.example.com", 443)


class FakeCache:
    def __init__(self, token: str | None = None) -> None:
        self.token = token
        self.stored: list[str] = []
        self.forgotten: list[str] = []
        self.fail_store = False

    @property
    def path(self) -> Path:
        return Path("/cache/gateway/tcp-x.token")

    def load(self) -> str | None:
        return self.token

    def store(self, token: str) -> None:
        if self.fail_store:
            raise PermissionError("read-only")
        self.token = token
        self.stored.append(token)

    def forget(self, token: str) -> bool:
        self.forgotten.append(token)
        if self.token == token:
            self.token = None
            return True
        return False


class Harness:
    def __init__(self, cache: FakeCache) -> None:
        self.cache = cache
        self.dials: list[tuple[str | None, Deferred[str | Refused]]] = []
        self.sign_ins: list[Deferred[str]] = []
        self.warnings: list[str] = []
        self.opener: TunnelOpener[str] = TunnelOpener(
            DEST, GATEWAY, self.dial, self.sign_in, cache, self.warnings.append)

    def dial(self, token: str | None) -> Deferred[str | Refused]:
        d: Deferred[str | Refused] = Deferred()
        self.dials.append((token, d))
        return d

    def sign_in(self) -> Deferred[str]:
        d: Deferred[str] = Deferred()
        self.sign_ins.append(d)
        return d

    def open(self) -> list[object]:
        results: list[object] = []
        Deferred.fromCoroutine(self.opener.open()).addBoth(results.append)
        return results

    def answer(self, index: int, result: str | Refused) -> None:
        self.dials[index][1].callback(result)


def message(results: list[object]) -> str:
    failure = results[0]
    assert isinstance(failure, Failure), failure
    failure.trap(TunnelError)
    return str(failure.value)


class OpenerTests(SynchronousTestCase):
    def test_cached_token_is_used(self) -> None:
        h = Harness(FakeCache("cached"))
        results = h.open()
        self.assertEqual([t for t, _ in h.dials], ["cached"])
        h.answer(0, TUNNEL)
        self.assertEqual(results, [TUNNEL])
        self.assertEqual(h.sign_ins, [])

    def test_sign_in_then_the_same_connection_retries_once(self) -> None:
        h = Harness(FakeCache())
        results = h.open()
        h.answer(0, Refused(401, "sign-in required"))
        self.assertEqual(len(h.sign_ins), 1)
        self.assertEqual(len(h.dials), 1)  # nothing until the sign-in is done
        h.sign_ins[0].callback("fresh")
        self.assertEqual([t for t, _ in h.dials], [None, "fresh"])
        h.answer(1, TUNNEL)
        self.assertEqual(results, [TUNNEL])
        self.assertEqual(h.cache.stored, ["fresh"])

    def test_redirect_also_means_sign_in(self) -> None:
        for status in (301, 302, 303, 307, 308):
            with self.subTest(status=status):
                h = Harness(FakeCache())
                results = h.open()
                h.answer(0, Refused(status, ""))
                h.sign_ins[0].callback("fresh")
                h.answer(1, TUNNEL)
                self.assertEqual(results, [TUNNEL])

    def test_refused_cached_token_is_deleted_before_signing_in(self) -> None:
        h = Harness(FakeCache("expired"))
        results = h.open()
        h.answer(0, Refused(401, ""))
        self.assertEqual(h.cache.forgotten, ["expired"])
        self.assertIsNone(h.cache.token)
        h.sign_ins[0].callback("fresh")
        h.answer(1, TUNNEL)
        self.assertEqual(results, [TUNNEL])
        self.assertEqual(h.cache.token, "fresh")

    def test_new_token_refused_too_is_an_error_not_a_loop(self) -> None:
        h = Harness(FakeCache())
        results = h.open()
        h.answer(0, Refused(401, ""))
        h.sign_ins[0].callback("fresh")
        h.answer(1, Refused(401, "session expired"))
        self.assertIn("still asks to sign in", message(results))
        self.assertEqual(len(h.sign_ins), 1)
        self.assertEqual(len(h.dials), 2)
        self.assertEqual(h.cache.forgotten, ["fresh"])
        self.assertIsNone(h.opener.token)

    def test_other_statuses_are_errors_without_sign_in(self) -> None:
        for status, expected in ((403, "access denied to db.example.com:5432"),
                                 (404, "no TCP route for db.example.com:5432"),
                                 (503, "is down or unreachable"),
                                 (504, "did not accept the connection in time")):
            with self.subTest(status=status):
                h = Harness(FakeCache("good"))
                results = h.open()
                h.answer(0, Refused(status, ""))
                self.assertIn(expected, message(results))
                self.assertEqual(h.sign_ins, [])
                self.assertEqual(h.cache.forgotten, [])  # the token itself was fine

    def test_denied_after_sign_in(self) -> None:
        h = Harness(FakeCache())
        results = h.open()
        h.answer(0, Refused(401, ""))
        h.sign_ins[0].callback("bob")
        h.answer(1, Refused(403, "You are signed in, but this route does not allow you in."))
        text = message(results)
        self.assertIn("access denied", text)
        self.assertIn("delete /cache/gateway/tcp-x.token", text)
        self.assertEqual(h.cache.token, "bob")

    def test_concurrent_connections_share_one_sign_in(self) -> None:
        h = Harness(FakeCache())
        first, second = h.open(), h.open()
        h.answer(0, Refused(401, ""))
        h.answer(1, Refused(401, ""))
        self.assertEqual(len(h.sign_ins), 1)
        h.sign_ins[0].callback("fresh")
        self.assertEqual([t for t, _ in h.dials[2:]], ["fresh", "fresh"])
        h.answer(2, TUNNEL)
        h.answer(3, TUNNEL)
        self.assertEqual((first, second), ([TUNNEL], [TUNNEL]))
        self.assertEqual(h.opener.sign_ins, 1)

    def test_late_refusal_uses_the_token_of_a_finished_sign_in(self) -> None:
        h = Harness(FakeCache())
        first, second = h.open(), h.open()
        h.answer(0, Refused(401, ""))
        h.sign_ins[0].callback("fresh")
        h.answer(2, TUNNEL)
        h.answer(1, Refused(401, ""))  # dialled without a token before the sign-in ended
        self.assertEqual(len(h.sign_ins), 1)
        self.assertEqual(h.dials[3][0], "fresh")
        h.answer(3, TUNNEL)
        self.assertEqual((first, second), ([TUNNEL], [TUNNEL]))

    def test_token_stored_by_another_process_is_used(self) -> None:
        h = Harness(FakeCache("old"))
        results = h.open()
        h.cache.token = "from-another-client"  # stored while our CONNECT was under way
        h.answer(0, Refused(401, ""))
        self.assertEqual(h.sign_ins, [])
        self.assertEqual(h.dials[1][0], "from-another-client")
        h.answer(1, TUNNEL)
        self.assertEqual(results, [TUNNEL])

    def test_failed_sign_in_fails_every_waiting_connection(self) -> None:
        h = Harness(FakeCache())
        first, second = h.open(), h.open()
        h.answer(0, Refused(401, ""))
        h.answer(1, Refused(401, ""))
        h.sign_ins[0].errback(TunnelError("no sign-in within 5 minutes"))
        self.assertEqual(message(first), "no sign-in within 5 minutes")
        self.assertEqual(message(second), "no sign-in within 5 minutes")
        third = h.open()  # the next connection may try again
        h.answer(2, Refused(401, ""))
        self.assertEqual(len(h.sign_ins), 2)
        h.sign_ins[1].callback("fresh")
        h.answer(3, TUNNEL)
        self.assertEqual(third, [TUNNEL])

    def test_cancelled_connection_does_not_disturb_the_others(self) -> None:
        h = Harness(FakeCache())
        results: list[object] = []
        first = Deferred.fromCoroutine(h.opener.open())
        first.addBoth(results.append)
        second = h.open()
        h.answer(0, Refused(401, ""))
        h.answer(1, Refused(401, ""))
        first.cancel()
        h.sign_ins[0].callback("fresh")
        h.answer(2, TUNNEL)
        self.assertEqual(second, [TUNNEL])
        assert isinstance(results[0], Failure)

    def test_unwritable_cache_warns_and_goes_on(self) -> None:
        cache = FakeCache()
        cache.fail_store = True
        h = Harness(cache)
        results = h.open()
        h.answer(0, Refused(401, ""))
        h.sign_ins[0].callback("fresh")
        h.answer(1, TUNNEL)
        self.assertEqual(results, [TUNNEL])
        self.assertEqual(len(h.warnings), 1)
        self.assertIn("cannot save the token in /cache/gateway/tcp-x.token", h.warnings[0])
        second = h.open()  # the token lives on in this process
        self.assertEqual(h.dials[2][0], "fresh")
        h.answer(2, TUNNEL)
        self.assertEqual(second, [TUNNEL])
