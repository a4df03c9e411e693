"""Value syntaxes: durations, booleans, lists, maps, base64 secrets, URLs, addresses."""

from __future__ import annotations

import base64

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.values import (
    decode_secret,
    format_duration,
    parse_address,
    parse_bool,
    parse_duration,
    parse_list,
    parse_map,
    split_url,
)


class DurationTests(SynchronousTestCase):
    def test_go_syntax(self) -> None:
        """Go durations parse into seconds, including fractions and unit sequences."""
        cases = {
            "300ms": 0.3, "30s": 30, "5m": 300, "14h": 50400, "1.5h": 5400,
            "1h45m": 6300, "0": 0, "2h3m4s": 7384, "1500us": 0.0015, "1µs": 1e-6,
            "100ns": 1e-7, ".5s": 0.5, "+2s": 2,
        }
        for text, seconds in cases.items():
            self.assertAlmostEqual(parse_duration(text), seconds, msg=text)

    def test_rejects_bad_durations(self) -> None:
        """Missing units, unknown units, garbage and negatives are refused with a hint."""
        for text in ("30", "5 m", "1d", "abc", "", "1h-5m", "s", "1h 5m"):
            with self.assertRaises(ValueError, msg=text) as caught:
                parse_duration(text)
            self.assertIn("30s", str(caught.exception))
        with self.assertRaises(ValueError) as caught:
            parse_duration("-5s")
        self.assertIn("negative", str(caught.exception))

    def test_format_round_trips(self) -> None:
        """Rendering gives the compact Go form used in docs and messages."""
        for text in ("14h", "30s", "5m", "0s", "1h45m", "300ms", "10m", "1m"):
            self.assertEqual(format_duration(parse_duration(text)), text)


class ScalarTests(SynchronousTestCase):
    def test_bool_spellings(self) -> None:
        """YAML booleans and Go's ParseBool spellings are accepted; others refused."""
        for value in (True, "true", "TRUE", "1", "t", "yes", 1):
            self.assertIs(parse_bool(value), True)
        for value in (False, "false", "0", "F", "no", 0):
            self.assertIs(parse_bool(value), False)
        for value in ("maybe", 2, None, []):
            self.assertRaises(ValueError, parse_bool, value)

    def test_list_forms(self) -> None:
        """Lists come as YAML lists, comma-separated strings or JSON list strings."""
        self.assertEqual(parse_list(["a", "b"]), ("a", "b"))
        self.assertEqual(parse_list("a, b ,c"), ("a", "b", "c"))
        self.assertEqual(parse_list('["x","y"]'), ("x", "y"))
        self.assertEqual(parse_list("hello world"), ("hello world",))
        self.assertRaises(ValueError, parse_list, [{"a": 1}])

    def test_map_forms(self) -> None:
        """Maps come as mappings, k=v pairs, JSON objects or YAML mappings."""
        self.assertEqual(parse_map({"a": 1}), {"a": "1"})
        self.assertEqual(parse_map("a=1,b=2"), {"a": "1", "b": "2"})
        self.assertEqual(parse_map('{"a": "1"}'), {"a": "1"})
        self.assertEqual(parse_map("a: 1\nb: two"), {"a": "1", "b": "two"})
        self.assertEqual(parse_map("X-A:foo,X-B:bar", ":"), {"X-A": "foo", "X-B": "bar"})
        self.assertRaises(ValueError, parse_map, "nopair", ":")
        self.assertRaises(ValueError, parse_map, {"a": {"nested": 1}})


class SecretTests(SynchronousTestCase):
    def test_valid_secret(self) -> None:
        """Standard and URL-safe base64 of 32 bytes decode, with or without padding."""
        raw = bytes(range(200, 232))
        for text in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode(),
                     base64.b64encode(raw).decode().rstrip("=")):
            self.assertEqual(decode_secret(text, "shared-key"), raw)

    def test_wrong_length(self) -> None:
        """A 31-byte key is refused with the original's exact message."""
        with self.assertRaises(ValueError) as caught:
            decode_secret("gN3xnvfsAwfCXxnJorGLKUG4l2wC8sS8nfLMhcStPg==", "cookie-secret")
        self.assertEqual(str(caught.exception), "cryptutil: got 31 bytes but want 32")

    def test_bad_base64_and_whitespace(self) -> None:
        """Invalid base64 and embedded whitespace give the original's messages."""
        with self.assertRaises(ValueError) as caught:
            decode_secret("gN3xnvfsAwfCXxnJorGLKUG4l2wC8sS8nfLMhcStPYw^", "cookie-secret")
        self.assertTrue(str(caught.exception).startswith("cryptutil: invalid base64:"))
        with self.assertRaises(ValueError) as caught:
            decode_secret("YixWi1MYh77NMECGGIJQevoonYtVF+ZPRkQZrrmeRqM=\n", "shared-key")
        self.assertEqual(str(caught.exception), "config: shared-key contains whitespace")


class UrlAndAddressTests(SynchronousTestCase):
    def test_url_errors(self) -> None:
        """URLs without a scheme or host are refused, naming the value."""
        cases = {
            "": "url cannot be empty",
            "https://": "https:// url does not contain a valid hostname",
            "httpbin.corp.example": "httpbin.corp.example url does not contain a valid scheme",
            "%20": "%20 url does not contain a valid scheme",
            "localhost:8080": "localhost:8080 url does not contain a valid scheme",
        }
        for value, message in cases.items():
            with self.assertRaises(ValueError, msg=value) as caught:
                split_url(value)
            self.assertEqual(str(caught.exception), message)
        self.assertEqual(split_url("https://a.example:8443").port, 8443)

    def test_addresses(self) -> None:
        """host:port, :port, [v6]:port parse; quotes are stripped; bad ports refused."""
        self.assertEqual(parse_address(":443"), ("", 443))
        self.assertEqual(parse_address("127.0.0.1:8443"), ("127.0.0.1", 8443))
        self.assertEqual(parse_address("[::1]:80"), ("::1", 80))
        self.assertEqual(parse_address('":80"'), ("", 80))
        for bad in ("8080", "host:http", "::1:80", "h:70000", "[::1]80"):
            self.assertRaises(ValueError, parse_address, bad)
