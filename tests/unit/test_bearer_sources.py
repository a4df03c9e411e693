"""Where a bearer provider's keys come from (issue 42), with a clock and a table of
answers: the last good keys survive an endpoint that is down or answers garbage, tries
back off, an unknown ``kid`` refreshes at most once a minute, only configured URLs are
fetched, a ``jwks_file`` is read again when it changes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.source import (
    FIRST_RETRY,
    MAX_RETRY,
    REFRESH,
    UNKNOWN_KID_INTERVAL,
    FileKeys,
    RemoteKeys,
)
from gateway.services.bearer_keys import BearerKeys, BearerProvider, bearer_providers
from tests.support.bearer_tokens import ec_key, jwks_bytes, rsa_key

ISSUER = "https://issuer.example.test"
DISCOVERY = f"{ISSUER}/.well-known/openid-configuration"
JWKS = f"{ISSUER}/jwks"


def discovery(issuer: str = ISSUER, jwks_uri: str = JWKS, **extra: Any) -> bytes:
    return json.dumps({"issuer": issuer, "jwks_uri": jwks_uri, **extra}).encode()


class Answers:
    """A ``Fetch`` answering from a table; an exception in the table is raised."""

    def __init__(self, **table: bytes | Exception) -> None:
        self.table: dict[str, bytes | Exception] = {DISCOVERY: discovery()}
        self.table.update({k.replace("_", "/"): v for k, v in table.items()})
        self.asked: list[str] = []

    def set(self, url: str, answer: bytes | Exception) -> None:
        self.table[url] = answer

    async def __call__(self, url: str) -> bytes:
        self.asked.append(url)
        answer = self.table.get(url, ConnectionRefusedError(f"nothing at {url}"))
        if isinstance(answer, Exception):
            raise answer
        return answer


def first_keys() -> bytes:
    return jwks_bytes((rsa_key(), "k1"))


def rotated_keys() -> bytes:
    return jwks_bytes((rsa_key(), "k1"), (ec_key(), "k2"))


class Remote(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.answers = Answers()
        self.answers.set(JWKS, first_keys())
        self.source = RemoteKeys("ci", ISSUER, self.answers, self.clock)

    def started(self) -> RemoteKeys:
        self.successResultOf(self.source.start())
        self.addCleanup(self.source.stop)
        return self.source

    def test_discovery_then_keys(self) -> None:
        source = self.started()
        self.assertEqual(list(source.keys.keys), ["k1"])
        self.assertEqual(self.answers.asked, [DISCOVERY, JWKS])

    def test_refreshed_every_interval_without_discovery(self) -> None:
        source = self.started()
        self.answers.set(JWKS, rotated_keys())
        self.clock.advance(REFRESH - 1)
        self.assertEqual(list(source.keys.keys), ["k1"])
        self.clock.advance(1)
        self.assertEqual(list(source.keys.keys), ["k1", "k2"])
        self.assertEqual(self.answers.asked, [DISCOVERY, JWKS, JWKS])

    def test_unchanged_document_keeps_the_same_key_set(self) -> None:
        source = self.started()
        before = source.keys
        self.clock.advance(REFRESH)
        self.assertIs(source.keys, before)  # the verifier's cache stays

    def test_down_or_garbage_keeps_the_last_good_keys_with_backoff(self) -> None:
        source = self.started()
        good = source.keys
        failures: list[bytes | Exception] = [
            ConnectionRefusedError("down"), b"<html>oops</html>", b'{"keys": []}',
            jwks_bytes(), json.dumps({"keys": [{"kty": "oct", "k": "AA"}]}).encode()]
        for i, answer in enumerate(failures):
            self.answers.set(JWKS, answer)
            self.clock.advance(REFRESH if i == 0 else FIRST_RETRY * 2 ** (i - 1))
            self.assertIs(source.keys, good)
        self.assertEqual(source.failures, 5)
        # the next try is 16 s after the 5th failure, not sooner
        self.answers.set(JWKS, rotated_keys())
        self.clock.advance(FIRST_RETRY * 2 ** 4 - 0.5)
        self.assertIs(source.keys, good)
        self.clock.advance(0.5)
        self.assertEqual(list(source.keys.keys), ["k1", "k2"])
        self.assertEqual(source.failures, 0)

    def test_backoff_is_capped(self) -> None:
        self.answers.set(JWKS, ConnectionRefusedError("down"))
        self.started()
        delays = []
        for _ in range(12):
            call, = self.clock.getDelayedCalls()
            delays.append(call.getTime() - self.clock.seconds())
            self.clock.advance(delays[-1])
        self.assertEqual(delays[:4], [1, 2, 4, 8])
        self.assertEqual(delays[-1], MAX_RETRY)

    def test_a_failed_key_fetch_asks_discovery_again(self) -> None:
        self.started()
        self.answers.set(JWKS, ConnectionRefusedError("moved"))
        self.answers.set(DISCOVERY, discovery(jwks_uri=f"{ISSUER}/v2/jwks"))
        self.answers.set(f"{ISSUER}/v2/jwks", rotated_keys())
        self.clock.advance(REFRESH)
        self.clock.advance(FIRST_RETRY)
        self.assertEqual(list(self.source.keys.keys), ["k1", "k2"])
        self.assertEqual(self.answers.asked[-3:], [JWKS, DISCOVERY, f"{ISSUER}/v2/jwks"])

    def test_unknown_kid_refresh_at_most_once_a_minute(self) -> None:
        source = self.started()
        self.answers.set(JWKS, rotated_keys())
        source.unknown_kid()  # the start was a moment ago: not yet
        self.assertEqual(list(source.keys.keys), ["k1"])
        self.clock.advance(UNKNOWN_KID_INTERVAL)
        for _ in range(100):
            source.unknown_kid()
        self.assertEqual(list(source.keys.keys), ["k1", "k2"])
        self.assertEqual(self.answers.asked.count(JWKS), 2)
        self.clock.advance(UNKNOWN_KID_INTERVAL - 1)
        source.unknown_kid()
        self.assertEqual(self.answers.asked.count(JWKS), 2)
        self.clock.advance(1)
        source.unknown_kid()
        self.assertEqual(self.answers.asked.count(JWKS), 3)

    def test_one_fetch_at_a_time(self) -> None:
        pending: Deferred[bytes] = Deferred()
        asked: list[str] = []

        async def slow(url: str) -> bytes:
            asked.append(url)
            return await pending

        source = RemoteKeys("ci", ISSUER, slow, self.clock, jwks_url=JWKS)
        first = source.start()
        self.clock.advance(UNKNOWN_KID_INTERVAL)
        source.unknown_kid()
        self.assertIs(source.try_now(), first)
        self.assertEqual(asked, [JWKS])
        pending.callback(first_keys())
        self.successResultOf(first)
        source.stop()
        self.assertEqual(list(source.keys.keys), ["k1"])

    def test_discovery_must_name_the_configured_issuer(self) -> None:
        self.answers.set(DISCOVERY, discovery(issuer="https://evil.example.test"))
        source = self.started()
        self.assertEqual(dict(source.keys.keys), {})
        self.assertEqual(self.answers.asked, [DISCOVERY])

    def test_an_issuer_ending_in_a_slash(self) -> None:
        """Auth0's and Azure AD v1's issuers end in ``/``: discovery is joined without
        a second slash, and its document must name the issuer as configured, slash
        included."""
        for issuer in ("https://tenant.auth0.com/", "https://sts.windows.net/tid-1/"):
            base = issuer.rstrip("/")
            answers = Answers()
            answers.set(f"{base}/.well-known/openid-configuration",
                        discovery(issuer, f"{base}/jwks"))
            answers.set(f"{base}/jwks", first_keys())
            source = RemoteKeys("auth0", issuer, answers, self.clock)
            self.successResultOf(source.start())
            self.addCleanup(source.stop)
            self.assertEqual(list(source.keys.keys), ["k1"])
            self.assertNotIn("//.well-known", answers.asked[0])

    def test_only_https_jwks_uri(self) -> None:
        self.answers.set(DISCOVERY, discovery(jwks_uri="http://issuer.example.test/jwks"))
        source = self.started()
        self.assertEqual((dict(source.keys.keys), self.answers.asked), ({}, [DISCOVERY]))

    def test_configured_jwks_url_skips_discovery(self) -> None:
        source = RemoteKeys("ci", ISSUER, self.answers, self.clock, jwks_url=JWKS)
        self.successResultOf(source.start())
        source.stop()
        self.assertEqual((list(source.keys.keys), self.answers.asked), (["k1"], [JWKS]))

    def test_learned_issuer(self) -> None:
        api = "https://kubernetes.default.svc"
        answers = Answers()
        answers.set(f"{api}/.well-known/openid-configuration",
                    discovery(issuer="https://oidc.cluster.example", jwks_uri=f"{api}/keys"))
        answers.set(f"{api}/keys", first_keys())
        source = RemoteKeys("cluster", "kubernetes:///", answers, self.clock,
                            discovery_url=f"{api}/.well-known/openid-configuration",
                            learn_issuer=True)
        self.successResultOf(source.start())
        source.stop()
        self.assertEqual(source.keys.issuer, "https://oidc.cluster.example")

    def test_stop_cancels_the_next_try(self) -> None:
        self.started().stop()
        self.assertEqual(self.clock.getDelayedCalls(), [])


class File(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        self.path = directory / "jwks.json"
        self.path.write_bytes(first_keys())
        self.source = FileKeys("cluster", str(self.path), self.clock, issuer="https://k8s")
        self.source.start()
        self.addCleanup(self.source.stop)

    def rewrite(self, data: bytes) -> None:
        self.path.write_bytes(data)
        status = self.path.stat()
        os.utime(self.path, ns=(status.st_atime_ns, status.st_mtime_ns + 1_000_000_000))

    def test_read_at_start_with_the_given_issuer(self) -> None:
        self.assertEqual((list(self.source.keys.keys), self.source.keys.issuer),
                         (["k1"], "https://k8s"))

    def test_reloaded_on_change(self) -> None:
        self.rewrite(rotated_keys())
        self.clock.advance(5)
        self.assertEqual(list(self.source.keys.keys), ["k1", "k2"])

    def test_garbage_or_missing_keeps_the_last_good_keys(self) -> None:
        good = self.source.keys
        self.rewrite(b'{"keys": [')
        self.clock.advance(5)
        self.assertIs(self.source.keys, good)
        self.path.unlink()
        self.clock.advance(5)
        self.assertIs(self.source.keys, good)
        self.rewrite(rotated_keys())
        self.clock.advance(5)  # looked at again within the poll interval
        self.assertEqual(list(self.source.keys.keys), ["k1", "k2"])

    def test_unknown_kid_looks_at_once(self) -> None:
        self.rewrite(rotated_keys())
        self.clock.advance(1)
        self.source.unknown_kid()
        self.assertEqual(list(self.source.keys.keys), ["k1", "k2"])


class Service(SynchronousTestCase):
    def test_sources_run_with_the_service(self) -> None:
        clock = Clock()
        answers = Answers()
        answers.set(JWKS, first_keys())
        source = RemoteKeys("ci", ISSUER, answers, clock)
        service = BearerKeys({"ci": source})
        service.startService()
        self.assertEqual(list(source.keys.keys), ["k1"])
        self.assertEqual(len(clock.getDelayedCalls()), 1)
        service.stopService()
        self.assertEqual(clock.getDelayedCalls(), [])


class Reload(SynchronousTestCase):
    """``BearerKeys.update``: a reload keeps the sources (and keys) it does not change."""

    def setUp(self) -> None:
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(shutil.rmtree, directory)
        self.first = directory / "a.json"
        self.first.write_bytes(first_keys())
        self.second = directory / "b.json"
        self.second.write_bytes(rotated_keys())
        self.reactor = MemoryReactorClock()
        self.service = BearerKeys()
        self.service.startService()
        self.addCleanup(self.service.stopService)

    def provider(self, name: str, path: Path, audience: str = "gw") -> BearerProvider:
        return BearerProvider(BearerExpectations(name, ISSUER, (audience,)),
                              jwks_file=str(path))

    def test_unchanged_sources_are_kept(self) -> None:
        verifiers = self.service.update(self.reactor, [self.provider("a", self.first),
                                                       self.provider("b", self.second)])
        a, b = self.service.sources["a"], self.service.sources["b"]
        self.assertEqual(list(a.keys.keys), ["k1"])  # started at once: the file is read
        self.assertIs(verifiers["a"].source, a)
        # a reload: a's audience changes (a new verifier, the same source), b's file moves
        verifiers = self.service.update(self.reactor, [
            self.provider("a", self.first, audience="other"), self.provider("b", self.first)])
        self.assertIs(self.service.sources["a"], a)
        self.assertIsNot(self.service.sources["b"], b)
        self.assertEqual(verifiers["a"].expect.audiences, ("other",))
        self.assertEqual(list(self.service.sources["b"].keys.keys), ["k1"])
        # b's old source was stopped: its poll no longer runs
        self.assertTrue(b._stopped)

    def test_removed_providers_are_stopped(self) -> None:
        self.service.update(self.reactor, [self.provider("a", self.first)])
        a = self.service.sources["a"]
        self.assertEqual(self.service.update(self.reactor, []), {})
        self.assertEqual((self.service.sources, a._stopped), ({}, True))


class RefusalLog(SynchronousTestCase):
    def test_one_line_without_the_token(self) -> None:
        from twisted.logger import globalLogPublisher

        from gateway.bearer_jwt.verifier import log_refused
        from gateway.bearer_jwt.verify import Refused

        events: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(events.append)
        self.addCleanup(globalLogPublisher.removeObserver, events.append)
        log_refused(Refused("expired", "the token has expired", "k1"), "ci", "req-7")
        (event,) = [e for e in events if e.get("log_namespace") == "gateway.bearer"]
        self.assertEqual((event["provider"], event["check"], event["kid"],
                          event["request_id"]), ("ci", "expired", "k1", "req-7"))


class FromConfiguration(SynchronousTestCase):
    """``bearer_providers``: the bearer entries of ``identity_providers`` as the key
    sources and verifiers need them."""

    def test_entries_to_providers_and_verifiers(self) -> None:
        import trustme
        import yaml

        from gateway.config import load_snapshot
        from tests.unit.config.helpers import IDENTITY, base_config, write

        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        write(directory, "cluster-jwks.json", first_keys())
        ca = trustme.CA().cert_pem.bytes()
        write(directory, "ca.pem", ca)
        providers = [
            {"id": "gh", "issuer": "https://token.actions.githubusercontent.com",
             "bearer": {"audiences": ["https://gw.example"]}, "ca_file": "ca.pem"},
            {"id": "cluster", "issuer": "https://k8s.example", "jwks_file": "cluster-jwks.json",
             "bearer": {"audiences": ["gateway"], "groups_claim": "roles",
                        "allow_unverified_email": True}},
            {"id": "people", "issuer": "https://login.example", "client_id": "gw",
             "client_secret": "s"}]
        path = write(directory, "config.yaml", yaml.safe_dump(base_config(
            **{**IDENTITY, "identity_providers": providers})))
        found = bearer_providers(load_snapshot(path))
        self.assertEqual([p.expect for p in found], [
            BearerExpectations("gh", "https://token.actions.githubusercontent.com",
                               ("https://gw.example",)),
            BearerExpectations("cluster", "https://k8s.example", ("gateway",),
                               groups_claim="roles", trust_unverified_email=True)])
        self.assertEqual((found[0].ca_pem, found[0].jwks_file), (ca, ""))
        self.assertEqual(found[1].jwks_file, f"{directory}/cluster-jwks.json")
        service = BearerKeys()
        verifiers = service.update(MemoryReactorClock(), found)
        self.assertEqual(sorted(verifiers), ["cluster", "gh"])
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual(list(service.sources["cluster"].keys.keys), ["k1"])

    def test_an_issuer_is_kept_exactly_as_configured(self) -> None:
        """Found in review (issue 42): a configured issuer lost its trailing slash, but
        a bearer token's ``iss`` is compared exactly, so Auth0
        (``https://tenant.auth0.com/``) and Azure AD v1
        (``https://sts.windows.net/{tenant}/``) tokens could never pass."""
        from gateway.config.errors import Problems
        from gateway.config.providers import parse_identity_providers

        entries = [{"id": "auth0", "issuer": "https://tenant.auth0.com/",
                    "bearer": {"audiences": ["gw"]}},
                   {"id": "azure", "issuer": "https://sts.windows.net/tid-1/",
                    "client_id": "gw", "client_secret": "s"},
                   {"id": "plain", "issuer": "https://login.example",
                    "bearer": {"audiences": ["gw"]}}]
        problems = Problems()
        parsed = parse_identity_providers(entries, problems)
        self.assertEqual(problems.errors, [])
        self.assertEqual([p.issuer for p in parsed], [
            "https://tenant.auth0.com/", "https://sts.windows.net/tid-1/",
            "https://login.example"])


class _Client:
    """An HTTP client (``client_for``) that answers 200 and says which it was."""

    def __init__(self, ca: bytes | None) -> None:
        self.ca = ca

    def get(self, url: str, **kwargs: Any) -> Any:
        return SimpleNamespace(code=200), self.ca


class ServiceAccountToken(SynchronousTestCase):
    def test_the_token_and_cluster_ca_go_to_the_api_server_only(self) -> None:
        """Found in review (issue 42): with ``kubernetes:///`` the pod's
        service-account token was sent on every fetch, the ``jwks_uri`` discovery names
        included (on EKS and GKE a public host), and every host was verified against
        the cluster CA. Now the token and the cluster CA are for the discovery URL's
        origin (the API server) only; other hosts get no token and the system store."""
        from gateway.services import bearer_keys

        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        token_file = f"{directory}/token"
        with open(token_file, "w", encoding="ascii") as f:
            f.write("pod-credential\n")
        seen: list[tuple[str, dict[Any, Any], Any]] = []

        async def traced(method: str, url: str, headers: dict[Any, Any], send: Any
                         ) -> tuple[Any, bytes]:
            response, ca = send(headers)
            seen.append((url, headers, ca))
            return response, b"{}"

        self.patch(bearer_keys, "traced_request", traced)
        api = "https://kubernetes.default.svc/.well-known/openid-configuration"
        fetch = bearer_keys.provider_fetch(
            None, None, token_file, api_url=api, api_ca=b"cluster-ca",
            client_for=_Client)  # type: ignore[arg-type]
        for url in (api, "https://oidc.eks.example.test/id/ABC/keys",
                    "https://kubernetes.default.svc:444/openid/v1/jwks",
                    "https://kubernetes.default.svc/openid/v1/jwks"):
            self.successResultOf(ensureDeferred(fetch(url)))
        self.assertEqual([(h.get("Authorization"), ca) for _, h, ca in seen], [
            ("Bearer pod-credential", b"cluster-ca"), (None, None), (None, None),
            ("Bearer pod-credential", b"cluster-ca")])


class FetchDeadline(SynchronousTestCase):
    def test_the_deadline_runs_on_the_reactor_given(self) -> None:
        """A fetch's 10 s deadline is the provider's reactor's (a clock in tests), not
        the global reactor's: a fetch that never answers fails at the deadline."""
        from gateway.authenticate.oidc import TIMEOUT
        from gateway.services.bearer_keys import provider_fetch

        reactor = MemoryReactorClock()
        fetching = ensureDeferred(provider_fetch(reactor)("https://issuer.example/jwks"))
        self.assertNoResult(fetching)
        reactor.advance(TIMEOUT)
        self.failureResultOf(fetching)
