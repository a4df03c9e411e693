"""Sealed tokens, the session cookie (attributes, chunking, stripping) and the memory
session store (reference section 1.2; the gateway seals with ChaCha20-Poly1305)."""

from __future__ import annotations

import base64
import json
import os

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from twisted.trial.unittest import SynchronousTestCase

from gateway.sessions import cookie
from gateway.sessions.cookie import (
    CANARY,
    MAX_CHUNK,
    MAX_CHUNKS,
    clear_cookie_headers,
    parse_cookies,
    read_cookie,
    set_cookie_headers,
    strip_cookie,
)
from gateway.sessions.sealed import Sealer
from gateway.sessions.spent import SpentTokens

NOW = 1_700_000_000.0
KEY = b"k" * 32
OTHER_KEY = b"o" * 32


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def raw_seal(key: bytes, purpose: str, body: bytes) -> str:
    """A token laid out as ``Sealer.seal`` lays it out, around an arbitrary body."""
    nonce = os.urandom(12)
    return b64(nonce + ChaCha20Poly1305(key).encrypt(nonce, body, purpose.encode()))


def attributes(header: bytes) -> list[str]:
    """The attributes of a ``Set-Cookie`` value, without the name=value pair."""
    return [part.strip() for part in header.decode("latin-1").split(";")[1:]]


def pair(header: bytes) -> tuple[str, str]:
    name, _, value = header.decode("latin-1").split(";")[0].partition("=")
    return name, value


def jar_from(headers: list[bytes]) -> dict[str, str]:
    """What a browser would send back for these ``Set-Cookie`` values."""
    return parse_cookies([(b"Cookie", b"; ".join(h.split(b";")[0] for h in headers))])


class SealerTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.sealer = Sealer(KEY)

    def test_round_trip(self) -> None:
        """A sealed payload opens to itself plus its integer expiry."""
        token = self.sealer.seal("session", {"sid": "abc", "n": [1, "x"]}, NOW + 60.9)
        self.assertEqual(self.sealer.open("session", token, NOW),
                         {"sid": "abc", "n": [1, "x"], "exp": int(NOW + 60)})

    def test_token_is_url_safe(self) -> None:
        """Tokens travel in cookies and query strings: base64url without padding."""
        for size in range(0, 40):
            token = self.sealer.seal("p", {"v": "x" * size}, NOW + 60)
            self.assertRegex(token, r"^[A-Za-z0-9_-]+$")

    def test_wrong_purpose(self) -> None:
        """A token sealed for one purpose does not open for another."""
        token = self.sealer.seal("sign-in", {"uri": "https://app.test/"}, NOW + 60)
        self.assertIsNone(self.sealer.open("handoff", token, NOW))
        self.assertIsNone(self.sealer.open("", token, NOW))
        self.assertIsNotNone(self.sealer.open("sign-in", token, NOW))

    def test_wrong_key(self) -> None:
        """A token sealed with another key does not open."""
        token = Sealer(OTHER_KEY).seal("session", {"sid": "abc"}, NOW + 60)
        self.assertIsNone(self.sealer.open("session", token, NOW))

    def test_flipped_byte_anywhere(self) -> None:
        """Changing any bit of nonce, ciphertext or tag makes the token unreadable."""
        token = self.sealer.seal("session", {"sid": "abc"}, NOW + 60)
        raw = unb64(token)
        for index in range(len(raw)):
            for bit in (0x01, 0x80):
                tampered = bytearray(raw)
                tampered[index] ^= bit
                self.assertIsNone(self.sealer.open("session", b64(bytes(tampered)), NOW),
                                  f"byte {index} bit {bit:#x}")

    def test_truncated(self) -> None:
        """Every strict prefix of a token (and extra bytes) is refused."""
        token = self.sealer.seal("session", {"sid": "abc"}, NOW + 60)
        raw = unb64(token)
        for length in range(len(raw)):
            self.assertIsNone(self.sealer.open("session", b64(raw[:length]), NOW), length)
        self.assertIsNone(self.sealer.open("session", b64(raw + b"\0"), NOW))
        self.assertIsNone(self.sealer.open("session", token[:-4], NOW))

    def test_expired(self) -> None:
        """A token opens strictly before its expiry and never at or after it."""
        token = self.sealer.seal("session", {"sid": "abc"}, NOW + 60)
        self.assertIsNotNone(self.sealer.open("session", token, NOW + 59.999))
        self.assertIsNone(self.sealer.open("session", token, NOW + 60))
        self.assertIsNone(self.sealer.open("session", token, NOW + 3600))
        past = self.sealer.seal("session", {"sid": "abc"}, NOW - 1)
        self.assertIsNone(self.sealer.open("session", past, NOW))

    def test_non_json_and_bad_payloads(self) -> None:
        """Authentic bodies that are not a JSON object with an integer exp are refused."""
        exp = int(NOW + 60)
        for body in (b"not json", b"\xff\xfe", b"", b"[1,2]", b'"text"', b"{}",
                     json.dumps({"sid": "a"}).encode(),
                     json.dumps({"exp": str(exp)}).encode(),
                     json.dumps({"exp": exp + 0.5}).encode(),
                     json.dumps({"exp": None}).encode()):
            token = raw_seal(KEY, "session", body)
            self.assertIsNone(self.sealer.open("session", token, NOW), body)
        good = raw_seal(KEY, "session", json.dumps({"exp": exp, "sid": "a"}).encode())
        self.assertEqual(self.sealer.open("session", good, NOW), {"exp": exp, "sid": "a"})

    def test_malformed_text(self) -> None:
        """Empty, non-base64, non-ASCII and nonsense tokens are refused without raising."""
        for token in ("", "=", "!!!!", "a", "ab", "é" * 30, "\x00" * 40, "A" * 40,
                      "A" * 8193):
            self.assertIsNone(self.sealer.open("session", token, NOW), repr(token))

    def test_oversized(self) -> None:
        """Tokens longer than 8192 characters are refused, even when authentic."""
        big = self.sealer.seal("session", {"pad": "x" * 7000}, NOW + 60)
        self.assertGreater(len(big), 8192)
        self.assertIsNone(self.sealer.open("session", big, NOW))
        fits = self.sealer.seal("session", {"pad": "x" * 6000}, NOW + 60)
        self.assertLessEqual(len(fits), 8192)
        self.assertIsNotNone(self.sealer.open("session", fits, NOW))

    def test_random_nonce(self) -> None:
        """Sealing the same payload twice gives different tokens that both open."""
        first = self.sealer.seal("session", {"sid": "abc"}, NOW + 60)
        second = self.sealer.seal("session", {"sid": "abc"}, NOW + 60)
        self.assertNotEqual(first, second)
        self.assertNotEqual(unb64(first)[:12], unb64(second)[:12])
        self.assertEqual(self.sealer.open("session", first, NOW),
                         self.sealer.open("session", second, NOW))


class ParseCookiesTests(SynchronousTestCase):
    def test_several_headers_spaces_quotes(self) -> None:
        """Every Cookie header counts; spaces around pairs and value quotes are dropped."""
        jar = parse_cookies([
            (b"Cookie", b"a=1;b=2"),
            (b"Accept", b"c=9"),
            (b"cookie", b'  c=3 ;  d="quoted value" ; e=x=y;;flag; =nameless'),
            (b"COOKIE", b"f="),
        ])
        self.assertEqual(jar["a"], "1")
        self.assertEqual(jar["b"], "2")
        self.assertEqual(jar["d"], "quoted value")
        self.assertEqual(jar["e"], "x=y")
        self.assertEqual(jar["f"], "")
        self.assertNotIn("flag", jar)
        self.assertNotIn("", jar)
        self.assertEqual(jar["c"], "3")

    def test_first_duplicate_wins(self) -> None:
        """A later cookie with the same name does not override the first."""
        jar = parse_cookies([(b"Cookie", b"s=first; s=second"), (b"Cookie", b"s=third")])
        self.assertEqual(jar, {"s": "first"})

    def test_names_are_case_sensitive(self) -> None:
        """Cookie names keep their case."""
        jar = parse_cookies([(b"Cookie", b"S=upper; s=lower")])
        self.assertEqual(jar, {"S": "upper", "s": "lower"})

    def test_no_cookie_header(self) -> None:
        """Without a Cookie header the jar is empty."""
        self.assertEqual(parse_cookies([(b"Host", b"app.test")]), {})


class SetCookieTests(SynchronousTestCase):
    def test_attributes(self) -> None:
        """Path, Max-Age, Secure, HttpOnly and SameSite=Lax; no Domain unless set."""
        [header] = set_cookie_headers("_gateway", "value", max_age=3600, domain="",
                                      secure=True, http_only=True)
        self.assertEqual(pair(header), ("_gateway", "value"))
        attrs = attributes(header)
        self.assertEqual(attrs, ["Path=/", "Max-Age=3600", "Secure", "HttpOnly",
                                 "SameSite=Lax"])
        self.assertFalse(any(a.lower().startswith("domain") for a in attrs))

    def test_domain_and_flags_off(self) -> None:
        """Domain appears when configured; Secure and HttpOnly only when asked for."""
        [header] = set_cookie_headers("_gateway", "v", max_age=0, domain="example.com",
                                      secure=False, http_only=False)
        self.assertEqual(attributes(header), ["Path=/", "Max-Age=0", "Domain=example.com",
                                              "SameSite=Lax"])

    def test_short_value_is_one_cookie(self) -> None:
        """A value of exactly MAX_CHUNK characters is one cookie with no canary."""
        value = "v" * MAX_CHUNK
        headers = set_cookie_headers("_gateway", value, max_age=1, domain="", secure=True,
                                     http_only=True)
        self.assertEqual(len(headers), 1)
        self.assertEqual(pair(headers[0]), ("_gateway", value))
        self.assertEqual(read_cookie(jar_from(headers), "_gateway"), value)

    def test_chunking_round_trip(self) -> None:
        """A long value becomes name (with the % canary), name_1, ... and reassembles."""
        value = "".join(chr(ord("a") + i % 26) for i in range(MAX_CHUNK * 2 + 17))
        headers = set_cookie_headers("_gateway", value, max_age=60, domain="d.test",
                                     secure=True, http_only=True)
        self.assertEqual(len(headers), 3)
        names = [pair(h)[0] for h in headers]
        self.assertEqual(names, ["_gateway", "_gateway_1", "_gateway_2"])
        first = pair(headers[0])[1]
        self.assertTrue(first.startswith(CANARY))
        self.assertEqual(first[1:], value[:MAX_CHUNK])
        self.assertEqual(pair(headers[1])[1], value[MAX_CHUNK:2 * MAX_CHUNK])
        self.assertEqual(pair(headers[2])[1], value[2 * MAX_CHUNK:])
        for header in headers:
            self.assertEqual(attributes(header), attributes(headers[0]))
            self.assertIn("Domain=d.test", attributes(header))
        self.assertEqual(read_cookie(jar_from(headers), "_gateway"), value)

    def test_largest_chunked_value(self) -> None:
        """MAX_CHUNKS extra chunks are allowed and read back; one more is refused."""
        value = "z" * (MAX_CHUNK * (MAX_CHUNKS + 1))
        headers = set_cookie_headers("c", value, max_age=1, domain="", secure=True,
                                     http_only=True)
        self.assertEqual(len(headers), MAX_CHUNKS + 1)
        self.assertEqual(read_cookie(jar_from(headers), "c"), value)
        with self.assertRaises(ValueError):
            set_cookie_headers("c", value + "z", max_age=1, domain="", secure=True,
                               http_only=True)

    def test_missing_middle_chunk_stops_reassembly(self) -> None:
        """Reassembly stops at the first missing chunk; later chunks are ignored."""
        jar = {"_gateway": "%aaa", "_gateway_1": "bbb", "_gateway_3": "ddd"}
        self.assertEqual(read_cookie(jar, "_gateway"), "aaabbb")
        self.assertEqual(read_cookie({"_gateway": "%aaa", "_gateway_2": "c"}, "_gateway"),
                         "aaa")

    def test_read_unchunked_and_missing(self) -> None:
        """Without a canary the value is read as is, chunk cookies ignored."""
        self.assertEqual(read_cookie({"_gateway": "abc", "_gateway_1": "x"}, "_gateway"),
                         "abc")
        self.assertIsNone(read_cookie({"_gateway_1": "x"}, "_gateway"))
        self.assertIsNone(read_cookie({}, "_gateway"))

    def test_clear_clears_chunks(self) -> None:
        """Clearing expires the base cookie and every possible chunk with the same scope."""
        headers = clear_cookie_headers("_gateway", "example.com", True)
        names = [pair(h)[0] for h in headers]
        self.assertEqual(names, ["_gateway"] + [f"_gateway_{i}"
                                                for i in range(1, MAX_CHUNKS + 1)])
        for header in headers:
            self.assertEqual(pair(header)[1], "")
            attrs = attributes(header)
            self.assertIn("Path=/", attrs)
            self.assertIn("Max-Age=0", attrs)
            self.assertIn("Expires=Thu, 01 Jan 1970 00:00:00 GMT", attrs)
            self.assertIn("Domain=example.com", attrs)
            self.assertIn("Secure", attrs)
        plain = clear_cookie_headers("_gateway", "", False)
        self.assertFalse(any("Domain" in h.decode() or "Secure" in h.decode()
                             for h in plain))

    def test_module_limits(self) -> None:
        """The chunk limits are those of the reference (3800 bytes, 5 chunks, %)."""
        self.assertEqual((cookie.MAX_CHUNK, cookie.MAX_CHUNKS, cookie.CANARY),
                         (3800, 5, "%"))


class StripCookieTests(SynchronousTestCase):
    def test_removes_cookie_and_chunks(self) -> None:
        """The gateway cookie and its numbered chunks go; every other cookie stays."""
        value = (b"a=1; _gateway=%sealed; _gateway_1=two;_gateway_2=three; "
                 b"_gateway_12=x; b=2")
        self.assertEqual(strip_cookie(value, "_gateway"), b"a=1; b=2")

    def test_keeps_lookalikes(self) -> None:
        """Names that only start with the prefix (no digits after it) are kept."""
        value = (b"_gateway_csrf=t; _gateway_=e; _gateway_1a=m; _gateway2=n; "
                 b"_gatewayx=y; x_gateway=z; _gateway_-1=w; _GATEWAY=u")
        self.assertEqual(strip_cookie(value, "_gateway"), value)

    def test_only_gateway_cookies(self) -> None:
        """A header holding only the gateway cookie becomes empty."""
        self.assertEqual(strip_cookie(b"_gateway=abc; _gateway_1=def", "_gateway"), b"")
        self.assertEqual(strip_cookie(b"", "_gateway"), b"")

    def test_value_mentioning_name_kept(self) -> None:
        """A cookie whose value mentions the gateway cookie name is not removed."""
        self.assertEqual(strip_cookie(b"ref=_gateway=1;_gateway=2", "_gateway"),
                         b"ref=_gateway=1")

    def test_long_headers_are_not_kept(self) -> None:
        """Headers up to 4 KiB are remembered (a browser repeats its header); longer ones
        are stripped alike but not kept, so junk cannot hold 256 x 64 KiB."""
        from gateway.sessions.cookie import _strip_cookie_cached
        _strip_cookie_cached.cache_clear()
        short = b"a=1; _gateway=x"
        long = b"a=" + b"1" * 5000 + b"; _gateway=x"
        self.assertEqual(strip_cookie(short, "_gateway"), b"a=1")
        self.assertEqual(strip_cookie(long, "_gateway"), long[:-len(b"; _gateway=x")])
        self.assertEqual(_strip_cookie_cached.cache_info().currsize, 1)

    def test_reads_names_as_the_jar_does(self) -> None:
        """Found by fuzzing: a name behind whitespace only ``str.strip`` removes
        (``\\x1f``, ``\\xa0``) was the gateway's cookie to ``parse_cookies`` but kept
        for the upstream by ``strip_cookie``."""
        for value in (b"a=1;\x1f_gateway_1=two", b"\xa0_gateway=x; a=1", b"\x1c_gateway=x"):
            stripped = strip_cookie(value, "_gateway")
            self.assertNotIn(b"_gateway", stripped, value)
            self.assertIn("_gateway" if b"_gateway=" in value else "_gateway_1",
                          parse_cookies([(b"cookie", value)]))

    def test_normalises_separators(self) -> None:
        """Empty pairs and stray spaces disappear; kept pairs are joined with '; '."""
        self.assertEqual(strip_cookie(b" a=1 ;; _gateway=x ;b=2 ", "_gateway"),
                         b"a=1; b=2")


class SpentTokensTests(SynchronousTestCase):
    """Single use for hand-offs: remembered until expiry, bounded memory."""

    def test_once_until_expiry(self) -> None:
        spent = SpentTokens()
        self.assertTrue(spent.spend("a", NOW + 60, NOW))
        self.assertFalse(spent.spend("a", NOW + 60, NOW + 30))
        self.assertTrue(spent.spend("b", NOW + 60, NOW + 30))
        # after its expiry the value is forgotten (the sealed value itself is refused then)
        spent.spend("c", NOW + 200, NOW + 61)
        self.assertEqual(len(spent), 1)

    def test_bounded(self) -> None:
        spent = SpentTokens(limit=3)
        for index in range(10):
            self.assertTrue(spent.spend(str(index), NOW + 60 + index, NOW))
            self.assertLessEqual(len(spent), 3)
        self.assertFalse(spent.spend("9", NOW + 69, NOW))  # the latest are kept

    def test_token_id_ignores_spelling(self) -> None:
        sealer = Sealer(KEY)
        token = sealer.seal("handoff", {"x": 1}, NOW + 60)
        self.assertEqual(Sealer.token_id(token), Sealer.token_id(token + "=="))
        self.assertNotEqual(Sealer.token_id(token),
                            Sealer.token_id(sealer.seal("handoff", {"x": 1}, NOW + 60)))
        self.assertEqual(Sealer.token_id("!!"), "")
