"""The data plane's own error answers through the HTTP/1.1 codec (issue 16): the page
family for browsers, one X-Frame-Options (DENY, not the configured SAMEORIGIN), the CSP,
the request id in the page and the X-Request-Id header, a client's id reused; and on a
proxied request one id, sent upstream and returned (issue 15)."""

from __future__ import annotations

from . import test_http1 as h1
from .test_http1 import get

BROWSER = b"Accept: text/html,application/xhtml+xml\r\n"
CSP = (b"default-src 'none'; style-src 'unsafe-inline'; "
       b"form-action 'self' https://authenticate.example.com")


class ErrorPageTests(h1.Http1TestCase):
    def test_404_page_for_a_browser(self) -> None:
        self.send(get(b"/", b"nope.example.com", extra=BROWSER))
        response = self.answer()
        self.assertEqual(response.status, 404)
        self.assertEqual(response.headers[b"x-frame-options"], [b"DENY"])
        self.assertEqual(response.headers[b"content-security-policy"], [CSP])
        self.assertEqual(response.headers[b"x-content-type-options"], [b"nosniff"])
        (rid,) = response.headers[b"x-request-id"]
        self.assertRegex(rid, rb"^[0-9a-f]{32}$")
        self.assertIn(rid, response.body)
        self.assertIn(b"There is nothing at this address.", response.body)
        self.assertIn(b"nope.example.com", response.body)
        self.assertOpen()

    def test_each_error_has_its_own_id(self) -> None:
        ids = set()
        for _ in range(3):
            self.send(get(b"/", b"nope.example.com"))
            ids.update(self.answer().headers[b"x-request-id"])
        self.assertEqual(len(ids), 3)

    def test_client_request_id_reused(self) -> None:
        self.send(get(b"/", b"nope.example.com", extra=b"X-Request-Id: ticket-42\r\n"))
        self.assertEqual(self.answer().headers[b"x-request-id"], [b"ticket-42"])

    def test_refused_http10_gets_the_page(self) -> None:
        """The codec's own refusals (here 426) are of the family too."""
        self.send(b"GET / HTTP/1.0\r\nHost: app.example.com\r\n" + BROWSER + b"\r\n")
        response = self.answer()
        self.assertEqual(response.status, 426)
        self.assertIn(b"This site needs HTTP/1.1 or newer.", response.body)
        self.assertEqual(response.headers[b"x-frame-options"], [b"DENY"])
        self.assertIn(b"x-request-id", response.headers)


class ProxiedPathIdTests(h1.Http1TestCase):
    def test_proxied_request_carries_one_id_both_ways(self) -> None:
        """Issue 15: an id is made when the client sent none, passed upstream and
        returned on the response (the same one), so logs on both sides can be joined."""
        self.send(h1.ForwardingTests.REQUEST)
        upstream = self.upstream()
        sent = [line for line in upstream.received().split(b"\r\n")
                if line.lower().startswith(b"x-request-id:")]
        self.assertEqual(len(sent), 1)
        upstream.respond(h1.ForwardingTests.RESPONSE)
        self.assertEqual(self.answer().headers[b"x-request-id"],
                         [sent[0].split(b":", 1)[1].strip()])
