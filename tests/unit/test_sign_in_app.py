"""The gateway's own endpoints are the sign-in web app's (``SignInApp``), asked by the
router before any route; the ``Authorizer`` decides routes only and is never asked about
them."""

from __future__ import annotations

from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.trial.unittest import SynchronousTestCase

from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.dataplane.codecs.http1 import Http1Connection
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.routing.plan import build_plan

from .test_http1 import CLIENT, SNAPSHOT


class Decisions:
    """An Authorizer that only records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def authorize(self, request: RequestInfo, route: Route) -> Decision:
        self.asked.append(request.path)
        return Reply(403, b"route refused\n", reason="test")

    def sign_in(self, request: RequestInfo) -> Decision:
        return Reply(401, b"sign in\n")


class App:
    """A sign-in web app answering ``/.gateway/hello`` on any host."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def handles(self, host: str, path: str) -> bool:
        return path.startswith("/.gateway/")

    def internal(self, request: RequestInfo, body: bytes = b"") -> Decision | None:
        self.asked.append(request.path)
        return Reply(200, b"hello from the app\n", reason="own-endpoint")


class SignInAppTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.decisions, self.app = Decisions(), App()
        reactor = MemoryReactorClock()
        self.core = ProxyCore(reactor, build_plan(SNAPSHOT), tls=False,
                              authorizer=self.decisions, sign_in_app=self.app)
        self.core.start()
        self.addCleanup(self.core.stop)

    def get(self, path: bytes) -> bytes:
        client = StringTransport(peerAddress=CLIENT)
        conn = Http1Connection(self.core)
        conn.makeConnection(client)
        conn.dataReceived(b"GET " + path + b" HTTP/1.1\r\nHost: private.example.com\r\n\r\n")
        return bytes(client.value())

    def test_own_endpoints_go_to_the_app(self) -> None:
        answer = self.get(b"/.gateway/hello")
        self.assertIn(b"hello from the app", answer)
        self.assertEqual((self.app.asked, self.decisions.asked), (["/.gateway/hello"], []))

    def test_routes_go_to_the_authorizer(self) -> None:
        answer = self.get(b"/page")
        self.assertTrue(answer.startswith(b"HTTP/1.1 403"), answer[:40])
        self.assertEqual((self.app.asked, self.decisions.asked), ([], ["/page"]))
