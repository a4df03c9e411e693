"""The programmatic sign-in of ``gateway tcp`` on a memory reactor: the one-shot local
server, the URL printed and opened, the browser's visit with ``gateway_jwt``, the
"signed in" page, the bounded wait; and how ``dial`` turns connection failures into
messages a person can act on."""

from __future__ import annotations

from typing import Any

from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet.address import IPv4Address
from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.internet.error import (
    ConnectionDone,
    ConnectionRefusedError,
    DNSLookupError,
    TCPTimedOutError,
    TimeoutError,
)
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from zope.interface import implementer

from gateway.cli.tcp.dial import ANSWER_TIMEOUT, GatewayConnection, dial
from gateway.cli.tcp.messages import TunnelError
from gateway.cli.tcp.options import GatewayURL
from gateway.cli.tcp.sign_in import SIGN_IN_TIMEOUT, sign_in
from gateway.cli.tcp.wire import Refused

SIGN_IN_URL = "http://authenticate.localhost:8080/.gateway/sign_in?gateway_redirect=x"


def outcome(d: Deferred[Any]) -> list[object]:
    results: list[object] = []
    d.addBoth(results.append)
    return results


class SignInTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()
        self.said: list[str] = []
        self.opened: list[str] = []
        self.asked: list[str] = []
        self.login: Deferred[str] = Deferred()

    def get_url(self, redirect_uri: str) -> Deferred[str]:
        self.asked.append(redirect_uri)
        return self.login

    def start(self) -> list[object]:
        return outcome(Deferred.fromCoroutine(sign_in(
            self.reactor, "db:5432 at https://db:443", self.get_url, self.opened.append,
            self.said.append)))

    def browser_visit(self, target: bytes) -> bytes:
        port, factory, _, interface = self.reactor.tcpServers[-1]
        self.assertEqual((port, interface), (0, "127.0.0.1"))
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
        transport = StringTransport()
        protocol.makeConnection(transport)
        protocol.dataReceived(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        return transport.value()

    def secret_path(self) -> bytes:
        """The random path of this sign-in's redirect address."""
        (asked,) = self.asked
        self.assertRegex(asked, r"^http://127\.0\.0\.1:0/[A-Za-z0-9_-]{24}/$")
        return asked[len("http://127.0.0.1:0"):].encode()

    def test_the_whole_sign_in(self) -> None:
        results = self.start()
        path = self.secret_path()
        self.login.callback(SIGN_IN_URL)
        self.assertEqual(self.opened, [SIGN_IN_URL])
        self.assertTrue(any(SIGN_IN_URL in line for line in self.said))  # printed too
        self.assertEqual(results, [])
        page = self.browser_visit(path + b"?gateway_jwt=the-token")
        self.assertIn(b"200 OK", page.split(b"\r\n", 1)[0])
        self.assertIn(b"You can close this tab.", page)
        self.assertIn(b"cache-control: no-store", page.lower())
        self.reactor.advance(0)
        self.assertEqual(results, ["the-token"])
        self.assertEqual(self.said[-1], "signed in.")

    def test_other_visits_are_404_and_keep_waiting(self) -> None:
        results = self.start()
        self.login.callback(SIGN_IN_URL)
        path = self.secret_path()
        # a token planted without the random path (another local process, a web page
        # the person has open) is refused like any stray visit
        for target in (b"/favicon.ico", b"/", b"/?gateway_jwt=planted", path + b"x?gateway_jwt=t",
                       path + b"?gateway_jwt=", path + b"?gateway_jwt=a%20b"):
            with self.subTest(target=target):
                self.assertIn(b" 404 ", self.browser_visit(target).split(b"\r\n", 1)[0])
        self.reactor.advance(1)
        self.assertEqual(results, [])

    def test_the_wait_is_bounded(self) -> None:
        results = self.start()
        self.login.callback(SIGN_IN_URL)
        self.reactor.advance(SIGN_IN_TIMEOUT - 1)
        self.assertEqual(results, [])
        self.reactor.advance(1)
        failure = results[0]
        assert isinstance(failure, Failure)
        failure.trap(TunnelError)
        self.assertIn("no sign-in within 5 minutes", str(failure.value))

    def test_gateway_refusing_the_login_request(self) -> None:
        results = self.start()
        self.login.errback(TunnelError("the gateway refused to start a sign-in"))
        failure = results[0]
        assert isinstance(failure, Failure)
        failure.trap(TunnelError)
        self.assertEqual(self.opened, [])


@implementer(IStreamClientEndpoint)
class FakeEndpoint:
    """Connects the protocol to a StringTransport, or fails with ``error``."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.transport = StringTransport()
        self.protocol: Any = None

    def connect(self, factory: Factory) -> Deferred[Protocol]:
        if self.error is not None:
            return fail(self.error)
        protocol = factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 443))
        assert protocol is not None
        protocol.makeConnection(self.transport)
        self.protocol = protocol
        return succeed(protocol)


class FakeEndpoints:
    def __init__(self, endpoint: FakeEndpoint, tls: bool = True) -> None:
        self.gateway = GatewayURL("https" if tls else "http", "gw.example.com",
                                  443 if tls else 80)
        self._endpoint = endpoint

    def endpoint(self) -> FakeEndpoint:
        return self._endpoint


class DialTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = MemoryReactorClock()

    def dial(self, endpoint: FakeEndpoint, tls: bool = True) -> list[object]:
        endpoints: Any = FakeEndpoints(endpoint, tls)
        return outcome(Deferred.fromCoroutine(dial(self.reactor, endpoints, "db:5432", "tok")))

    def message(self, results: list[object]) -> str:
        failure = results[0]
        assert isinstance(failure, Failure), failure
        failure.trap(TunnelError)
        return str(failure.value)

    def lose(self, endpoint: FakeEndpoint, reason: Exception) -> None:
        protocol = endpoint.protocol
        assert isinstance(protocol, GatewayConnection)
        protocol.connectionLost(Failure(reason))

    def test_sends_connect_with_the_token(self) -> None:
        endpoint = FakeEndpoint()
        results = self.dial(endpoint)
        self.assertIn(b"Authorization: Gateway tok\r\n", endpoint.transport.value())
        endpoint.protocol.dataReceived(
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        self.assertEqual(results, [Refused(404, "")])

    def test_unreachable(self) -> None:
        for error, why in ((ConnectionRefusedError(), "connection refused"),
                           (DNSLookupError("gw.example.com"), "its name does not resolve"),
                           (TimeoutError(), "no connection within 10 s"),
                           (TCPTimedOutError(), "no connection within 10 s")):
            with self.subTest(why=why):
                text = self.message(self.dial(FakeEndpoint(error)))
                self.assertEqual(text, f"cannot reach the gateway at https://gw.example.com:443:"
                                       f" {why}; check --gateway-url and your network")

    def test_certificate_not_trusted_names_the_ca_options(self) -> None:
        endpoint = FakeEndpoint()
        results = self.dial(endpoint)
        self.lose(endpoint, SSL.Error([("SSL routines", "", "certificate verify failed")]))
        text = self.message(results)
        self.assertIn("TLS verification of the gateway https://gw.example.com:443 failed "
                      "(certificate verify failed)", text)
        for option in ("--alternate-ca-path", "--ca-cert", "--disable-tls-verification"):
            self.assertIn(option, text)

    def test_certificate_for_another_name(self) -> None:
        endpoint = FakeEndpoint()
        results = self.dial(endpoint)
        self.lose(endpoint, VerificationError(errors=["DNS mismatch"]))
        text = self.message(results)
        self.assertIn("the certificate is not valid for gw.example.com", text)
        self.assertIn("--alternate-ca-path", text)

    def test_https_to_a_plain_listener(self) -> None:
        endpoint = FakeEndpoint()
        results = self.dial(endpoint)
        self.lose(endpoint, SSL.Error([("SSL routines", "", "wrong version number")]))
        self.assertIn("is it an http:// listener? then use --gateway-url "
                      "http://gw.example.com", self.message(results))

    def test_http_to_something_else(self) -> None:
        endpoint = FakeEndpoint()
        results = self.dial(endpoint, tls=False)
        endpoint.protocol.dataReceived(b"\x15\x03\x01\x00\x02\x02\x32")
        self.assertIn("did not answer like a gateway", self.message(results))
        endpoint = FakeEndpoint()
        results = self.dial(endpoint, tls=False)
        self.lose(endpoint, ConnectionDone())
        self.assertIn("closed the connection without answering); is it an https:// "
                      "listener?", self.message(results))

    def test_cancelled_dial_is_not_an_error_message(self) -> None:
        for endpoint in (FakeEndpoint(CancelledError()), FakeEndpoint()):
            results = self.dial(endpoint)
            if endpoint.error is None:
                endpoint.protocol.answered.cancel()
            failure = results[0]
            assert isinstance(failure, Failure)
            self.assertTrue(failure.check(CancelledError))

    def test_no_answer_in_time_aborts(self) -> None:
        endpoint = FakeEndpoint()
        results = self.dial(endpoint)
        self.reactor.advance(ANSWER_TIMEOUT)
        self.assertTrue(endpoint.transport.disconnecting)
        self.assertIn(f"no answer within {ANSWER_TIMEOUT:.0f} s", self.message(results))
