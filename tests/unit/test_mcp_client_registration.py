"""Dynamic client registration (RFC 7591) in the MCP client directory: off by default
(a ``ClientRefused`` the endpoint answers 404), the metadata checked, every client
public, stored in the databroker so another process's directory knows it, rate-limited
per address (IPv6: its /64) and in all, and a registered id refused once registration
is turned off."""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from gateway.databroker.memory_records import MemoryRecordStore
from gateway.databroker.records import MCP_CLIENT
from gateway.mcp_oauth.client_types import ClientRefused, McpClient
from gateway.mcp_oauth.clients import (
    RATE_LIMITED,
    REGISTRATION_OFF,
    ClientDirectory,
    Settings,
    registration_response,
)
from gateway.mcp_oauth.clients.rate import RegistrationBuckets
from gateway.mcp_oauth.clients.registration import LIFETIME

GOOD = {"client_name": "Agent", "redirect_uris": ["http://localhost:3030/callback"],
        "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"],
        "token_endpoint_auth_method": "client_secret_post"}


def settings(registration: bool) -> Settings:
    return Settings(frozenset(), (), None, registration)


class RegistrationTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(1_000_000)
        self.records = MemoryRecordStore(self.clock.seconds)

    def directory(self, registration: bool = True, per_address: int = 3,
                  total: int = 5) -> ClientDirectory:
        return ClientDirectory(self.clock, self.records, settings(registration),
                               resolve=lambda host: self.fail(f"resolved {host}"),
                               buckets=RegistrationBuckets(self.clock.seconds, per_address,
                                                           total, 60.0))

    def register(self, directory: ClientDirectory, metadata: Any = GOOD,
                 peer: str = "192.0.2.10") -> McpClient:
        return self.successResultOf(directory.register(metadata, peer))

    def refused(self, directory: ClientDirectory, metadata: Any = GOOD,
                peer: str = "192.0.2.10") -> ClientRefused:
        return self.failureResultOf(directory.register(metadata, peer), ClientRefused).value

    def test_off_by_default_refuses_registration(self) -> None:
        refusal = self.refused(self.directory(registration=False))
        self.assertEqual(refusal.error, REGISTRATION_OFF)
        self.assertIn("mcp_dynamic_client_registration", refusal.description)
        self.assertEqual(self.successResultOf(self.records.query(MCP_CLIENT)), [])

    def test_registered_client_is_public_and_stored(self) -> None:
        client = self.register(self.directory())
        self.assertTrue(client.client_id.startswith("gwmcp_client_"))
        self.assertEqual((client.name, client.kind, client.token_endpoint_auth_method,
                          client.redirect_uris),
                         ("Agent", "registered", "none", ("http://localhost:3030/callback",)))
        answer = registration_response(client, self.clock.seconds())
        self.assertEqual(answer["token_endpoint_auth_method"], "none")
        self.assertNotIn("client_secret", answer)
        self.assertEqual(answer["client_id_issued_at"], 1_000_000)
        # another process (another directory over the same store) knows it
        other = self.directory()
        self.assertEqual(self.successResultOf(other.resolve(client.client_id)), client)

    def test_registration_expires_unless_used(self) -> None:
        directory = self.directory()
        client = self.register(directory)
        self.clock.advance(LIFETIME * 0.6)
        self.successResultOf(directory.resolve(client.client_id))  # used: extended
        self.clock.advance(LIFETIME * 0.6)
        self.successResultOf(directory.resolve(client.client_id))
        self.clock.advance(LIFETIME + 1)
        refusal = self.failureResultOf(directory.resolve(client.client_id), ClientRefused).value
        self.assertEqual(refusal.error, "invalid_client")

    def test_turning_registration_off_refuses_registered_clients(self) -> None:
        client = self.register(self.directory())
        directory = self.directory(registration=False)
        refusal = self.failureResultOf(directory.resolve(client.client_id), ClientRefused).value
        self.assertEqual(refusal.error, "invalid_client")
        self.assertIn("turned off", refusal.description)

    def test_unknown_ids_are_refused(self) -> None:
        directory = self.directory()
        for client_id in ("gwmcp_client_" + "A" * 32, "gwmcp_client_short", "anything", ""):
            refusal = self.failureResultOf(directory.resolve(client_id), ClientRefused).value
            self.assertEqual(refusal.error, "invalid_client", client_id)
            self.assertIn("not registered", refusal.description)

    def test_metadata_is_checked(self) -> None:
        directory = self.directory(per_address=100, total=100)
        for metadata, error, why in (
            ({}, "invalid_redirect_uri", "redirect_uris"),
            ({"redirect_uris": ["javascript:alert(1)"]}, "invalid_redirect_uri", "javascript"),
            ({"redirect_uris": ["http://evil.example/cb"]}, "invalid_redirect_uri", "loopback"),
            ({"redirect_uris": ["https://a.example/cb#x"]}, "invalid_redirect_uri", "fragment"),
            ({**GOOD, "token_endpoint_auth_method": "private_key_jwt"},
             "invalid_client_metadata", "public"),
            ({**GOOD, "grant_types": ["client_credentials"]}, "invalid_client_metadata",
             "client_credentials"),
            ({**GOOD, "response_types": ["token"]}, "invalid_client_metadata", "code"),
            ({**GOOD, "client_name": "a\u0000b"}, "invalid_client_metadata", "control"),
            ({**GOOD, "logo_uri": "data:image/png;base64,AA"}, "invalid_client_metadata",
             "logo_uri"),
            (["not", "an", "object"], "invalid_client_metadata", "JSON object"),
        ):
            refusal = self.refused(directory, metadata)
            self.assertEqual(refusal.error, error, metadata)
            self.assertIn(why, refusal.description, metadata)
        self.assertEqual(self.successResultOf(self.records.query(MCP_CLIENT)), [])

    def test_private_use_scheme_and_no_name(self) -> None:
        client = self.register(self.directory(), {"redirect_uris": [
            "cursor://anysphere.cursor-mcp/oauth/callback"]})
        self.assertEqual(client.name, "Unnamed MCP client")
        directory = self.directory()
        self.assertIsNone(directory.check_redirect_uri(
            client, "cursor://anysphere.cursor-mcp/oauth/callback"))
        self.assertIsNotNone(directory.check_redirect_uri(
            client, "cursor://anysphere.cursor-mcp/oauth/other"))

    def test_rate_limited_per_address(self) -> None:
        directory = self.directory(per_address=3, total=100)
        for _ in range(3):
            self.register(directory, peer="192.0.2.10")
        refusal = self.refused(directory, peer="192.0.2.10")
        self.assertEqual(refusal.error, RATE_LIMITED)
        self.assertIn("192.0.2.10", refusal.description)
        self.register(directory, peer="192.0.2.11")  # another address still may
        self.clock.advance(20.0)  # a third of the window: one registration back
        self.register(directory, peer="192.0.2.10")
        self.assertEqual(self.refused(directory, peer="192.0.2.10").error, RATE_LIMITED)

    def test_an_ipv6_client_is_its_64(self) -> None:
        directory = self.directory(per_address=2, total=100)
        self.register(directory, peer="2001:db8:1:2::1")
        self.register(directory, peer="2001:db8:1:2::ffff")
        self.assertEqual(self.refused(directory, peer="2001:db8:1:2:abcd::9").error,
                         RATE_LIMITED)
        self.register(directory, peer="2001:db8:1:3::1")

    def test_rate_limited_in_all(self) -> None:
        directory = self.directory(per_address=100, total=5)
        for n in range(5):
            self.register(directory, peer=f"192.0.2.{n}")
        refusal = self.refused(directory, peer="192.0.2.99")
        self.assertEqual(refusal.error, RATE_LIMITED)
        self.assertEqual(len(self.successResultOf(self.records.query(MCP_CLIENT))), 5)

    def test_refused_metadata_spends_no_registration(self) -> None:
        directory = self.directory(per_address=1, total=100)
        self.refused(directory, {"redirect_uris": []})
        self.register(directory)
