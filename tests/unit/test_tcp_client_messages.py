"""What a person reads for each way a tunnel can fail, and that it says what to do."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.cli.tcp import messages
from gateway.cli.tcp.options import Address, GatewayURL

DEST = Address("db.example.com", 5432)
TLS = GatewayURL("https", "db.example.com", 443)
PLAIN = GatewayURL("http", "gw.example.com", 8080)
CACHE = "/home/a/.cache/gateway/tcp-1.token"


class RefusedTests(SynchronousTestCase):
    def test_each_status(self) -> None:
        cases = {
            403: ("access denied to db.example.com:5432 through https://db.example.com:443 "
                  "(the gateway says: You are signed in, but this route does not allow you "
                  "in.). Ask the gateway's administrator for access; to sign in as someone "
                  f"else, delete {CACHE} and run again"),
            404: ("no TCP route for db.example.com:5432 at https://db.example.com:443: check "
                  "the destination (a route's from: must be tcp+https://db.example.com:5432 "
                  "exactly) and --gateway-url"),
            405: ("db.example.com:5432 is not a TCP route at https://db.example.com:443 (the "
                  "gateway says: zzz): it serves HTTP; open it in a browser instead"),
            495: ("the gateway wants a valid client certificate for db.example.com:5432 (the "
                  "gateway says: zzz)"),
            503: ("the TCP service behind db.example.com:5432 through https://db.example.com:"
                  "443 is down or unreachable (the gateway says: zzz); try again later or tell "
                  "the service's owner"),
            504: ("the TCP service behind db.example.com:5432 through https://db.example.com:"
                  "443 did not accept the connection in time (the gateway says: zzz); try again "
                  "later or tell the service's owner"),
            400: ("the gateway at https://db.example.com:443 refused the tunnel request as "
                  "malformed (the gateway says: zzz)"),
            502: "unexpected answer 502 from the gateway at https://db.example.com:443 "
                 "(the gateway says: zzz)",
        }
        for status, expected in cases.items():
            detail = ("You are signed in, but this route does not allow you in."
                      if status == 403 else "no TCP route for db.example.com:5432"
                      if status == 404 else "zzz")
            with self.subTest(status=status):
                self.assertEqual(messages.refused(status, detail, DEST, TLS, CACHE), expected)

    def test_denied_without_a_reason(self) -> None:
        self.assertIn("you are signed in, but the route's policy does not allow you",
                      messages.refused(403, "", DEST, TLS))

    def test_sign_in_statuses(self) -> None:
        for status in (401, 301, 302, 303, 307, 308):
            self.assertTrue(messages.needs_sign_in(status))
        for status in (200, 400, 403, 404, 503):
            self.assertFalse(messages.needs_sign_in(status))
        self.assertIn("still asks to sign in", messages.refused(401, "", DEST, TLS))


class ConnectionMessageTests(SynchronousTestCase):
    def test_unreachable(self) -> None:
        self.assertEqual(messages.unreachable(PLAIN, "connection refused"),
                         "cannot reach the gateway at http://gw.example.com:8080: connection "
                         "refused; check --gateway-url and your network")

    def test_tls_verification(self) -> None:
        text = messages.tls_failed(TLS, "certificate verify failed")
        self.assertTrue(text.startswith("TLS verification of the gateway "
                                        "https://db.example.com:443 failed (certificate "
                                        "verify failed); if the gateway uses a private CA"))
        self.assertIn("--alternate-ca-path FILE or --ca-cert BASE64", text)

    def test_scheme_mix_ups(self) -> None:
        self.assertIn("--gateway-url http://db.example.com",
                      messages.tls_broken(TLS, "wrong version number"))
        self.assertNotIn("--gateway-url", messages.tls_broken(TLS, "handshake failure"))
        self.assertIn("--gateway-url https://gw.example.com:8080",
                      messages.not_a_gateway(PLAIN, "the answer is not HTTP"))
