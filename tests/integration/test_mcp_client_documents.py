"""Client ID metadata documents fetched from a real HTTPS server on loopback (a test
CA, trial's reactor), every refusal the fetch makes: a loopback address without
``mcp_client_id_metadata_allowed_networks``, a redirect (never followed), a huge or a
slow document (a short deadline here), a wrong ``client_id``, http, an unlisted host,
a wrong content type, bad JSON, an untrusted certificate, a name whose certificate does
not match the address it resolved to; caching per Cache-Control and one fetch for
concurrent requests. And registrations in a real Redis, seen by another process's
directory."""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from twisted.internet import defer, reactor, ssl, task
from twisted.internet.defer import Deferred
from twisted.trial.unittest import TestCase
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from gateway.config.kvstore_dsn import parse_dsn
from gateway.databroker.cipher import RecordCipher
from gateway.databroker.kv_connect import connect
from gateway.databroker.kv_records import KVRecordStore
from gateway.databroker.memory_records import MemoryRecordStore
from gateway.mcp_oauth.client_types import ClientRefused, McpClient
from gateway.mcp_oauth.clients import RATE_LIMITED, REGISTRATION_OFF, ClientDirectory, Settings
from gateway.mcp_oauth.clients.fetch import FetchBounds, Resolver
from gateway.mcp_oauth.clients.rate import RegistrationBuckets
from tests.support.peers import redis_server

pytestmark = pytest.mark.integration

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
SHORT = FetchBounds(seconds=0.5, max_bytes=5 * 1024)


def make_ca(directory: Path, names: tuple[str, ...]) -> tuple[Path, bytes]:
    """A test CA's file and a server certificate+key (PEM) for ``names`` and 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cimd test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                 *(x509.DNSName(n) for n in names)]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    path = directory / "ca.pem"
    path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    server = leaf.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    return path, server


class Documents(Resource):
    """Each path one behaviour; ``hits`` counts the requests per path."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.hits: dict[str, int] = {}
        self.held: list[Request] = []
        self.lost: list[str] = []  # the held requests whose client went away
        self.timers: list[Any] = []

    def hold(self, request: Request) -> Any:
        self.held.append(request)
        path = request.path.decode()
        request.notifyFinish().addErrback(lambda _: self.lost.append(path))
        return NOT_DONE_YET

    def document(self, request: Request, **changes: Any) -> bytes:
        host = (request.getHeader("host") or "").strip()
        path = request.path.decode()
        data = {"client_id": f"https://{host}{path}", "client_name": "Test Agent",
                "redirect_uris": ["http://127.0.0.1:3000/callback"],
                "token_endpoint_auth_method": "none", **changes}
        return json.dumps(data).encode()

    def render_GET(self, request: Request) -> Any:
        path = request.path.decode()
        self.hits[path] = self.hits.get(path, 0) + 1
        request.setHeader(b"connection", b"close")
        request.setHeader(b"content-type", b"application/json; charset=utf-8")
        name = path.rsplit("/", 1)[-1]
        if name == "good.json":
            return self.document(request)
        if name == "cached.json":
            request.setHeader(b"cache-control", b"public, max-age=60")
            return self.document(request)
        if name == "nostore.json":
            request.setHeader(b"cache-control", b"no-store")
            return self.document(request)
        if name == "redirect.json":
            request.setResponseCode(302)
            request.setHeader(b"location", b"/oauth/good.json")
            return b""
        if name == "missing.json":
            request.setResponseCode(404)
            return b"{}"
        if name == "wrong-id.json":
            return self.document(request, client_id="https://elsewhere.example/client.json")
        if name == "html.json":
            request.setHeader(b"content-type", b"text/html")
            return self.document(request)
        if name == "bad.json":
            return b'{"client_id": '
        if name == "huge.json":
            return self.document(request, padding="x" * 64 * 1024)
        if name == "endless.json":  # chunked, no Content-Length, never ends
            request.write(b'{"padding": "')
            request.write(b"x" * 4096)
            self.timers.append(reactor.callLater(0.05, self.more, request))
            return self.hold(request)
        if name == "slow.json":  # a head, then nothing
            request.write(b'{"client_id": ')
            return self.hold(request)
        if name == "silent.json":  # no answer at all
            return self.hold(request)
        request.setResponseCode(500)
        return b"{}"

    def more(self, request: Request) -> None:
        if request.path.decode() in self.lost:
            return
        request.write(b"x" * 4096)
        self.timers.append(reactor.callLater(0.05, self.more, request))


class MetadataDocumentFetchTests(TestCase):
    timeout = 30

    def setUp(self) -> None:
        directory = Path(tempfile.mkdtemp(prefix="gw-cimd-"))
        self.addCleanup(shutil.rmtree, directory, True)
        self.ca_file, server = make_ca(directory, ("localhost", "client.test"))
        self.resource = Documents()
        site = Site(self.resource)
        port = reactor.listenSSL(0, site, ssl.PrivateCertificate.loadPEM(server.decode())
                                 .options(), interface="127.0.0.1")
        self.addCleanup(port.stopListening)
        self.port = port.getHost().port
        self.base = f"https://127.0.0.1:{self.port}/oauth"

    def tearDown(self) -> None:
        for timer in self.resource.timers:
            if timer.active():
                timer.cancel()

    def directory(self, hosts: tuple[str, ...] = ("127.0.0.1",), networks: Any = LOOPBACK,
                  ca: bool = True, resolve: Resolver | None = None,
                  bounds: FetchBounds = SHORT, max_fetches: int = 32) -> ClientDirectory:
        settings = Settings(frozenset(hosts), tuple(networks),
                            self.ca_file.read_bytes() if ca else None, False)
        return ClientDirectory(reactor, MemoryRecordStore(reactor.seconds), settings,
                               resolve=resolve, bounds=bounds, max_fetches=max_fetches)

    async def refused(self, directory: ClientDirectory, url: str) -> str:
        with self.assertRaises(ClientRefused) as caught:
            await directory.resolve(url)
        self.assertEqual(caught.exception.error, "invalid_client")
        return caught.exception.description

    async def test_good_document(self) -> None:
        url = f"{self.base}/good.json"
        client = await self.directory().resolve(url)
        self.assertEqual(client, McpClient(client_id=url, name="Test Agent",
                                           redirect_uris=("http://127.0.0.1:3000/callback",),
                                           kind="metadata_document"))

    async def test_loopback_without_the_exemption_is_not_even_connected_to(self) -> None:
        why = await self.refused(self.directory(networks=()), f"{self.base}/good.json")
        self.assertIn("127.0.0.1 is a loopback address", why)
        self.assertEqual(self.resource.hits, {})

    async def test_redirects_are_not_followed(self) -> None:
        why = await self.refused(self.directory(), f"{self.base}/redirect.json")
        self.assertIn("answered 302", why)
        self.assertIn("not followed", why)
        self.assertEqual(self.resource.hits, {"/oauth/redirect.json": 1})

    async def test_other_statuses_are_refused(self) -> None:
        self.assertIn("answered 404", await self.refused(self.directory(),
                                                         f"{self.base}/missing.json"))

    async def test_huge_document(self) -> None:
        why = await self.refused(self.directory(), f"{self.base}/huge.json")
        self.assertIn("more than 5120", why)

    async def test_endless_document_is_cut_off(self) -> None:
        started = time.monotonic()
        why = await self.refused(self.directory(bounds=FetchBounds(5.0, 5 * 1024)),
                                 f"{self.base}/endless.json")
        self.assertIn("larger than 5120 bytes", why)
        self.assertLess(time.monotonic() - started, 2.0)
        await deferLater(0.1)
        self.assertEqual(self.resource.lost, ["/oauth/endless.json"])  # the fetch hung up

    async def test_slow_document_meets_the_deadline(self) -> None:
        for name in ("slow.json", "silent.json"):
            started = time.monotonic()
            why = await self.refused(self.directory(), f"{self.base}/{name}")
            elapsed = time.monotonic() - started
            self.assertIn("no whole answer within 0.5 s", why)
            self.assertGreater(elapsed, 0.45)
            self.assertLess(elapsed, 2.0)
        # the deadline closed the connections the server still held
        await deferLater(0.1)
        self.assertEqual(self.resource.lost, ["/oauth/slow.json", "/oauth/silent.json"])

    async def test_fetches_at_once_are_bounded(self) -> None:
        """Client ids cost nothing to invent: beyond the bound a new one is refused at
        once (not queued), and the bound frees as fetches end."""
        directory = self.directory(max_fetches=2)
        held = [directory.resolve(f"{self.base}/silent.json?n={n}") for n in range(2)]
        with self.assertRaises(ClientRefused) as caught:
            await directory.resolve(f"{self.base}/good.json")
        self.assertEqual(caught.exception.error, "temporarily_unavailable")
        self.assertIn("2 documents are being fetched", caught.exception.description)
        for fetching in held:
            with self.assertRaises(ClientRefused):
                await fetching
        self.assertEqual((await directory.resolve(f"{self.base}/good.json")).name,
                         "Test Agent")

    async def test_wrong_client_id(self) -> None:
        why = await self.refused(self.directory(), f"{self.base}/wrong-id.json")
        self.assertIn("'https://elsewhere.example/client.json'", why)
        self.assertIn("must be the document's URL exactly", why)

    async def test_http_is_refused_without_a_request(self) -> None:
        why = await self.refused(self.directory(), f"http://127.0.0.1:{self.port}/oauth/good.json")
        self.assertIn("https", why)
        self.assertEqual(self.resource.hits, {})

    async def test_unlisted_host_is_refused_without_a_request(self) -> None:
        why = await self.refused(self.directory(hosts=("claude.ai",)),
                                 f"{self.base}/good.json")
        self.assertIn("127.0.0.1 is not in mcp_allowed_client_id_domains", why)
        self.assertEqual(self.resource.hits, {})

    async def test_content_type_and_json(self) -> None:
        self.assertIn("'text/html'", await self.refused(self.directory(),
                                                         f"{self.base}/html.json"))
        self.assertIn("not JSON", await self.refused(self.directory(), f"{self.base}/bad.json"))

    async def test_certificate_must_be_trusted(self) -> None:
        why = await self.refused(self.directory(ca=False), f"{self.base}/good.json")
        self.assertIn("TLS failed", why)

    async def test_connects_to_the_checked_address_verifying_the_urls_host(self) -> None:
        """The name is resolved once by the gateway and the connection made to that
        address; TLS still verifies the certificate for the URL's host."""
        asked: list[str] = []

        def resolve(host: str) -> Deferred[list[str]]:
            asked.append(host)
            return defer.succeed({"client.test": ["127.0.0.1"], "other.test": ["127.0.0.1"],
                                  "mixed.test": ["127.0.0.1", "10.1.2.3"]}[host])

        directory = self.directory(hosts=("client.test", "other.test", "mixed.test"),
                                   resolve=resolve)
        url = f"https://client.test:{self.port}/oauth/good.json"
        self.assertEqual((await directory.resolve(url)).client_id, url)
        why = await self.refused(directory, f"https://other.test:{self.port}/oauth/good.json")
        self.assertIn("TLS failed", why)
        why = await self.refused(directory, f"https://mixed.test:{self.port}/oauth/good.json")
        self.assertIn("10.1.2.3 is a private address", why)
        self.assertEqual(asked, ["client.test", "other.test", "mixed.test"])

    async def test_system_resolver(self) -> None:
        """``localhost`` through the reactor's resolver (every address it has, the
        first that accepts: the server listens on 127.0.0.1 only)."""
        url = f"https://localhost:{self.port}/oauth/good.json"
        self.assertEqual((await self.directory(hosts=("localhost",)).resolve(url)).name,
                         "Test Agent")
        why = await self.refused(self.directory(hosts=("localhost",), networks=()), url)
        self.assertIn("loopback", why)

    async def test_cache_follows_cache_control(self) -> None:
        directory = self.directory()
        for _ in range(3):
            await directory.resolve(f"{self.base}/cached.json")
            await directory.resolve(f"{self.base}/nostore.json")
        self.assertEqual(self.resource.hits, {"/oauth/cached.json": 1,
                                              "/oauth/nostore.json": 3})

    async def test_refusals_are_not_cached_and_concurrent_asks_share_a_fetch(self) -> None:
        directory = self.directory()
        for _ in range(2):
            await self.refused(directory, f"{self.base}/wrong-id.json")
        together = [directory.resolve(f"{self.base}/good.json") for _ in range(3)]
        clients = await defer.gatherResults(together)
        self.assertEqual(len({c.client_id for c in clients}), 1)
        self.assertEqual(self.resource.hits, {"/oauth/wrong-id.json": 2,
                                              "/oauth/good.json": 1})


async def deferLater(seconds: float) -> None:
    await task.deferLater(reactor, seconds, lambda: None)


class SharedRegistrationTests(TestCase):
    """Registrations in a real Redis: what one process registers, another resolves."""

    timeout = 30

    def setUp(self) -> None:
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        self.redis = stack.enter_context(redis_server(Path(tempfile.mkdtemp())))

    def directory(self, registration: bool, per_address: int = 20) -> ClientDirectory:
        redis = connect(parse_dsn(f"kvstore://127.0.0.1:{self.redis.port}/0"), 3.0, None,
                        "mcp-clients-test")
        store = KVRecordStore(reactor, redis, RecordCipher(b"k" * 32), reply_timeout=3.0)
        self.addCleanup(store.close)
        return ClientDirectory(reactor, store, Settings(frozenset(), (), None, registration),
                               buckets=RegistrationBuckets(reactor.seconds, per_address,
                                                           100, 3600.0))

    async def test_registered_in_one_process_known_in_another(self) -> None:
        one, two = self.directory(True), self.directory(True)
        client = await one.register({"client_name": "Agent",
                                     "redirect_uris": ["http://127.0.0.1:9/cb"]}, "127.0.0.1")
        self.assertEqual(await two.resolve(client.client_id), client)
        off = self.directory(False)
        with self.assertRaises(ClientRefused) as caught:
            await off.register({"redirect_uris": ["http://127.0.0.1:9/cb"]}, "127.0.0.1")
        self.assertEqual(caught.exception.error, REGISTRATION_OFF)
        with self.assertRaises(ClientRefused):
            await off.resolve(client.client_id)

    async def test_registration_is_rate_limited(self) -> None:
        directory = self.directory(True, per_address=2)
        metadata = {"redirect_uris": ["http://127.0.0.1:9/cb"]}
        for _ in range(2):
            await directory.register(metadata, "192.0.2.5")
        with self.assertRaises(ClientRefused) as caught:
            await directory.register(metadata, "192.0.2.5")
        self.assertEqual(caught.exception.error, RATE_LIMITED)
        await directory.register(metadata, "192.0.2.6")
