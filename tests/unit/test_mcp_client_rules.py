"""The pure rules of the MCP client directory (``gateway/mcp_oauth/clients``): which
addresses a metadata document may come from, which client ids are metadata document
URLs and which hosts may serve them, what a document must hold, which redirect URIs a
client may list and an authorization request may name, how long a document is kept,
and the settings that configure them (each problem naming its key)."""

from __future__ import annotations

import ipaddress
import json
import tempfile
from pathlib import Path
from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from gateway.databroker.memory_records import MemoryRecordStore
from gateway.mcp_oauth.client_types import ClientRefused, McpClient
from gateway.mcp_oauth.clients import ClientDirectory, Settings
from gateway.mcp_oauth.clients.addresses import address_refusal, addresses_refusal
from gateway.mcp_oauth.clients.client_ids import host_refusal, is_metadata_url, url_problem
from gateway.mcp_oauth.clients.document import client_of_document
from gateway.mcp_oauth.clients.freshness import DEFAULT_SECONDS, MAX_SECONDS, lifetime
from gateway.mcp_oauth.clients.redirect_uris import listing_problem, request_problem
from tests.support.otlp_receivers import make_tls
from tests.unit.config.helpers import base_config, errors_of, load, write

URL = "https://client.example.com/oauth/client.json"
LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)


class AddressTests(SynchronousTestCase):
    REFUSED = (
        ("127.0.0.1", "loopback"), ("127.8.9.10", "loopback"), ("::1", "loopback"),
        ("0.0.0.0", "unspecified"), ("::", "unspecified"),
        ("10.0.0.1", "private"), ("172.16.5.4", "private"), ("192.168.1.1", "private"),
        ("fc00::1", "private"), ("fd12:3456::1", "private"),
        ("100.64.0.1", "carrier-grade NAT"), ("100.127.255.254", "carrier-grade NAT"),
        ("169.254.169.254", "link-local"), ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("224.0.0.1", "multicast"), ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"), ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "link-local"), ("::ffff:0.0.0.0", "unspecified"),
        ("64:ff9b::7f00:1", "loopback"), ("2002:a00:1::", "private"),
        ("240.0.0.1", "private"), ("255.255.255.255", "private"),
        ("192.0.2.1", "private"), ("2001:db8::1", "private"), ("fec0::1", "site-local"),
        ("64:ff9b:1::1", "special-use"), ("::7f00:1", "special-use"),
    )

    def test_special_use_addresses_are_refused_with_their_kind(self) -> None:
        for address, kind in self.REFUSED:
            refusal = address_refusal(address)
            self.assertIsNotNone(refusal, address)
            assert refusal is not None
            self.assertIn(kind, refusal, address)
            self.assertIn("mcp_client_id_metadata_allowed_networks", refusal)

    def test_public_addresses_pass(self) -> None:
        for address in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8",
                        "64:ff9b::808:808", "2002:808:808::1", "100.128.0.1"):
            self.assertIsNone(address_refusal(address), address)

    def test_exempt_networks_are_allowed_mapped_forms_too(self) -> None:
        self.assertIsNone(address_refusal("127.0.0.1", LOOPBACK))
        self.assertIsNone(address_refusal("::ffff:127.0.0.1", LOOPBACK))
        self.assertIsNotNone(address_refusal("::1", LOOPBACK))
        self.assertIsNotNone(address_refusal("10.0.0.1", LOOPBACK))

    def test_unspecified_and_multicast_are_never_exempt(self) -> None:
        everything = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))
        for address in ("0.0.0.0", "::", "224.0.0.1", "ff02::1"):
            self.assertIsNotNone(address_refusal(address, everything), address)
        self.assertIsNone(address_refusal("10.0.0.1", everything))

    def test_one_bad_address_refuses_the_name(self) -> None:
        refusal = addresses_refusal(["8.8.8.8", "169.254.169.254"])
        assert refusal is not None
        self.assertIn("169.254.169.254", refusal)
        self.assertIsNone(addresses_refusal(["8.8.8.8", "1.1.1.1"]))
        self.assertIn("no address", addresses_refusal([]) or "")
        self.assertIn("not an IP address", address_refusal("example.com") or "")


class ClientIdTests(SynchronousTestCase):
    def test_good_urls(self) -> None:
        for url in (URL, "https://client.example.com:8443/c", "https://127.0.0.1/c.json",
                    "https://client.example.com/c?v=1"):
            parts, problem = url_problem(url)
            self.assertIsNone(problem, url)
            self.assertIsNotNone(parts)

    def test_bad_urls_say_why(self) -> None:
        for url, why in (
            ("http://client.example.com/c.json", "https URL"),
            ("HTTPS://client.example.com/c.json", "https URL"),
            ("https://client.example.com", "path"),
            ("https://client.example.com/", "path"),
            ("https://client.example.com/a/../c.json", ". or .."),
            ("https://client.example.com/a/./c.json", ". or .."),
            ("https://client.example.com/a/%2E%2e/c.json", ". or .."),
            ("https://client.example.com/c.json#frag", "fragment"),
            ("https://user:pw@client.example.com/c.json", "user"),
            ("https://evil.example@client.example.com/c.json", "user"),
            ("https://client.example.com/c json", "space"),
            ("https://client.example.com\\@evil.com/c", "backslash"),
            ("https://client.example.com:99999/c", "cannot be parsed"),
            ("https://:443/c", "no host"),
            ("https://client.example.com/" + "a" * 2000, "longer"),
        ):
            parts, problem = url_problem(url)
            self.assertIsNone(parts, url)
            self.assertIn(why, problem or "", url)

    def test_hosts_match_exactly(self) -> None:
        allowed = frozenset({"claude.ai", "127.0.0.1"})
        for url, ok in (("https://claude.ai/oauth/c", True), ("https://x.claude.ai/c", False),
                        ("https://claude.ai.evil.com/c", False), ("https://evilclaude.ai/c", False),
                        ("https://claude.ai./c", False), ("https://CLAUDE.AI/c", True),
                        ("https://127.0.0.1:8443/c", True)):
            parts, _ = url_problem(url)
            assert parts is not None, url
            refusal = host_refusal(parts, allowed)
            self.assertEqual(refusal is None, ok, url)
            if not ok:
                self.assertIn("mcp_allowed_client_id_domains", refusal or "")
        parts, _ = url_problem(URL)
        assert parts is not None
        self.assertIn("empty", host_refusal(parts, frozenset()) or "")

    def test_which_ids_are_urls(self) -> None:
        self.assertTrue(is_metadata_url(URL))
        self.assertTrue(is_metadata_url("http://client.example.com/c"))
        self.assertTrue(is_metadata_url("HTTPS:client"))
        self.assertFalse(is_metadata_url("gwmcp_client_abc"))


def document(**changes: Any) -> bytes:
    data: dict[str, Any] = {"client_id": URL, "client_name": "Example Agent",
                            "redirect_uris": ["http://127.0.0.1:3000/callback",
                                              "https://client.example.com/cb"],
                            "token_endpoint_auth_method": "none",
                            "grant_types": ["authorization_code", "refresh_token"],
                            "response_types": ["code"], "client_uri": "https://client.example.com",
                            "logo_uri": "https://client.example.com/logo.png"}
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return json.dumps(data).encode()


class DocumentTests(SynchronousTestCase):
    def refusal(self, body: bytes) -> str:
        with self.assertRaises(ClientRefused) as caught:
            client_of_document(URL, body)
        self.assertEqual(caught.exception.error, "invalid_client")
        self.assertIn(URL, caught.exception.description)
        return caught.exception.description

    def test_good_document(self) -> None:
        client = client_of_document(URL, document())
        self.assertEqual((client.client_id, client.name, client.kind), (URL, "Example Agent",
                                                                        "metadata_document"))
        self.assertEqual(client.redirect_uris, ("http://127.0.0.1:3000/callback",
                                                "https://client.example.com/cb"))
        self.assertEqual((client.client_uri, client.logo_uri, client.token_endpoint_auth_method),
                         ("https://client.example.com", "https://client.example.com/logo.png",
                          "none"))

    def test_the_minimal_document(self) -> None:
        body = json.dumps({"client_id": URL, "client_name": "A",
                           "redirect_uris": ["http://localhost:3000/cb"]}).encode()
        self.assertEqual(client_of_document(URL, body).redirect_uris,
                         ("http://localhost:3000/cb",))

    def test_client_id_must_be_the_url_exactly(self) -> None:
        for claimed in (URL + "/", URL.upper(), "https://client.example.com/other.json", None, 5):
            self.assertIn("client_id", self.refusal(document(client_id=claimed)))

    def test_required_fields(self) -> None:
        self.assertIn("client_name", self.refusal(document(client_name=None)))
        self.assertIn("client_name", self.refusal(document(client_name="  ")))
        self.assertIn("redirect_uris", self.refusal(document(redirect_uris=None)))
        self.assertIn("redirect_uris", self.refusal(document(redirect_uris=[])))
        self.assertIn("redirect_uris", self.refusal(document(redirect_uris="https://a/b")))

    def test_not_json(self) -> None:
        self.assertIn("not JSON", self.refusal(b"<html>"))
        self.assertIn("not UTF-8", self.refusal(b"\xff{}"))
        self.assertIn("not a JSON object", self.refusal(b"[]"))
        self.assertIn("twice", self.refusal(
            b'{"client_id": "%s", "client_id": "x"}' % URL.encode()))
        self.assertIn("nested", self.refusal(b"[" * 100000 + b"]" * 100000))

    def test_no_secrets_and_public_only(self) -> None:
        for method in ("client_secret_basic", "client_secret_post", "client_secret_jwt"):
            self.assertIn("shared secret",
                          self.refusal(document(token_endpoint_auth_method=method)))
        self.assertIn("public clients", self.refusal(
            document(token_endpoint_auth_method="private_key_jwt")))
        self.assertIn("client_secret", self.refusal(document(client_secret="s")))
        self.assertIn("client_secret_expires_at",
                      self.refusal(document(client_secret_expires_at=0)))

    def test_grant_and_response_types(self) -> None:
        self.assertIn("implicit", self.refusal(document(grant_types=["implicit"])))
        self.assertIn("authorization_code", self.refusal(document(grant_types=["refresh_token"])))
        self.assertIn("response_types", self.refusal(document(response_types=["token"])))

    def test_display_fields(self) -> None:
        self.assertIn("control", self.refusal(document(client_name="Evil\nAgent")))
        self.assertIn("longer", self.refusal(document(client_name="x" * 201)))
        self.assertIn("client_uri", self.refusal(document(client_uri="javascript:alert(1)")))
        self.assertIn("logo_uri", self.refusal(document(logo_uri="http://client.example.com/l")))

    def test_one_bad_redirect_uri_refuses_the_document(self) -> None:
        description = self.refusal(document(redirect_uris=["https://a.example/cb",
                                                           "javascript:alert(1)"]))
        self.assertIn("javascript", description)


class RedirectUriTests(SynchronousTestCase):
    LISTABLE = ("https://app.example.com/cb", "https://app.example.com:8443/cb?x=1",
                "http://127.0.0.1:3000/callback", "http://127.0.0.1/callback",
                "http://localhost:33418/", "http://[::1]:8080/cb", "http://127.5.6.7/cb",
                "com.example.app:/oauth2redirect", "cursor://anysphere.cursor-mcp/oauth/cb",
                "vscode://vscode.github-authentication/did-authenticate")
    NOT_LISTABLE = (
        ("javascript:alert(1)", "javascript"), ("JavaScript:alert(1)", "javascript"),
        ("data:text/html,<b>x</b>", "data"), ("file:///etc/passwd", "file"),
        ("vbscript:msgbox", "vbscript"), ("blob:https://a.example/x", "blob"),
        ("about:blank", "about"), ("http://app.example.com/cb", "loopback"),
        ("http://10.0.0.1/cb", "loopback"), ("http://127.0.0.1.example.com/cb", "loopback"),
        ("https://app.example.com/cb#x", "fragment"), ("https://app.example.com/cb#", "fragment"),
        ("https://user@app.example.com/cb", "user information"),
        ("http://127.0.0.1@evil.example/cb", "user information"),
        ("https:///cb", "no host"), ("/relative/cb", "scheme"), ("", "empty"),
        ("https://app.example.com/c b", "space"), ("https://app.example.com\\@x/", "backslash"),
        ("https://app.example.com/caf\u00e9", "non-ASCII"),
        ("https://app.example.com:99999/cb", "cannot be parsed"),
    )

    def test_listable(self) -> None:
        for uri in self.LISTABLE:
            self.assertIsNone(listing_problem(uri), uri)

    def test_not_listable(self) -> None:
        for uri, why in self.NOT_LISTABLE:
            self.assertIn(why, listing_problem(uri) or "", uri)
        self.assertIn("string", listing_problem(5) or "")  # type: ignore[arg-type]

    def test_requests_match_exactly(self) -> None:
        listed = self.LISTABLE
        for uri in listed:
            self.assertIsNone(request_problem(listed, uri), uri)
        for uri in ("https://app.example.com/cb/", "https://app.example.com/CB",
                    "https://app.example.com/cb?x=1", "https://app.example.com:443/cb",
                    "https://APP.example.com/cb", "https://other.example.com/cb",
                    "com.example.app:/other", "cursor://anysphere.cursor-mcp/oauth/cb2"):
            self.assertIn("not one of", request_problem(listed, uri) or "", uri)

    def test_loopback_http_port_is_free(self) -> None:
        """RFC 8252 7.3: the port of a loopback redirect is chosen by the app at run time."""
        listed = ("http://127.0.0.1/callback", "http://localhost:3000/cb", "http://[::1]/x")
        for uri in ("http://127.0.0.1:49152/callback", "http://127.0.0.1/callback",
                    "http://localhost:5555/cb", "http://[::1]:1/x"):
            self.assertIsNone(request_problem(listed, uri), uri)
        for uri in ("http://127.0.0.1:49152/other", "http://localhost:49152/callback",
                    "http://127.0.0.2:49152/callback", "http://127.0.0.1:49152/callback?a=b",
                    "https://127.0.0.1:49152/callback"):
            self.assertIsNotNone(request_problem(listed, uri), uri)

    def test_a_forbidden_uri_is_refused_even_when_listed(self) -> None:
        listed = ("javascript:alert(1)", "https://a.example/cb#frag")
        for uri in listed:
            self.assertIn("the redirect_uri", request_problem(listed, uri) or "", uri)


class FreshnessTests(SynchronousTestCase):
    def test_cache_headers(self) -> None:
        date = "Sun, 06 Dec 2026 09:00:00 GMT"
        for cache_control, expires, seconds in (
            ("", "", DEFAULT_SECONDS), ("max-age=60", "", 60.0),
            ("public, max-age=120", "", 120.0), ("max-age=86400", "", MAX_SECONDS),
            ("max-age=0", "", 0.0), ("no-store", "", 0.0), ("no-cache, max-age=60", "", 0.0),
            ("max-age=abc", "", 0.0), ("", "Sun, 06 Dec 2026 09:10:00 GMT", 600.0),
            ("", "Sun, 06 Dec 2026 08:00:00 GMT", 0.0), ("", "0", 0.0),
            ("max-age=30", "Sun, 06 Dec 2026 09:10:00 GMT", 30.0),
        ):
            self.assertEqual(lifetime(cache_control, expires, date), seconds,
                             (cache_control, expires))


class SettingsTests(SynchronousTestCase):
    def test_good_settings_load(self) -> None:
        directory = tempfile.mkdtemp(prefix="gw-mcp-")
        ca = make_tls(Path(directory)).ca
        snapshot = load(base_config(
            mcp_allowed_client_id_domains=["claude.ai", "vscode.dev", "127.0.0.1"],
            mcp_client_id_metadata_allowed_networks=["127.0.0.0/8", "fd00::/8"],
            mcp_client_id_metadata_ca_file=str(ca)))
        self.assertEqual(snapshot.material.mcp_client_id_metadata_ca, ca.read_bytes())
        self.assertEqual(Settings.of(snapshot), Settings(
            frozenset({"claude.ai", "vscode.dev", "127.0.0.1"}),
            (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("fd00::/8")),
            ca.read_bytes(), False))

    def test_reconfigure_forgets_documents_when_trust_changes(self) -> None:
        clock = Clock()
        first = Settings(frozenset({"a.example"}), (), None, False)
        directory = ClientDirectory(clock, MemoryRecordStore(clock.seconds), first)
        client = McpClient(URL, "A", ("https://a.example/cb",), "metadata_document")
        directory._cache[URL] = (client, 100.0)
        directory.reconfigure(Settings(frozenset({"a.example"}), (), None, True))
        self.assertIn(URL, directory._cache)  # registration is not about documents
        self.assertTrue(directory.settings.registration)
        directory.reconfigure(Settings(frozenset({"b.example"}), (), None, True))
        self.assertEqual(dict(directory._cache), {})

    def test_each_problem_names_its_key(self) -> None:
        directory = tempfile.mkdtemp(prefix="gw-mcp-")
        bad_ca = write(directory, "bad.pem", "not a certificate")
        problems = errors_of(base_config(
            mcp_allowed_client_id_domains=["*.claude.ai", "https://vscode.dev", "Claude.ai",
                                           "claude.ai:443", "bad_host"],
            mcp_client_id_metadata_allowed_networks=["127.0.0.1/8", "localhost"],
            mcp_client_id_metadata_ca_file=bad_ca))
        for expected in ("mcp_allowed_client_id_domains[0]: '*.claude.ai': wildcards",
                         "mcp_allowed_client_id_domains[1]: 'https://vscode.dev': write the host",
                         "mcp_allowed_client_id_domains[2]: 'Claude.ai': write the host in lower",
                         "mcp_allowed_client_id_domains[3]: 'claude.ai:443': write the host alone",
                         "mcp_allowed_client_id_domains[4]: 'bad_host' is not a DNS host name",
                         "mcp_client_id_metadata_allowed_networks[0]: '127.0.0.1/8' is not a",
                         "mcp_client_id_metadata_allowed_networks[1]: 'localhost' is not a",
                         "mcp_client_id_metadata_ca_file: config: not a valid PEM"):
            self.assertTrue(any(p.startswith(expected) for p in problems),
                            (expected, problems))
