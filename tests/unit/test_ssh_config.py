"""Native SSH settings and ssh:// routes: parsed once per snapshot, every problem at its
key path (issue 31)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import ConfigErrors
from gateway.config.known_hosts import fingerprint, parse_host_key_line
from gateway.config.snapshot import Snapshot, load_snapshot

HOST_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl")


def openssh_key(key: Any) -> bytes:
    return bytes(key.private_bytes(serialization.Encoding.PEM,
                                   serialization.PrivateFormat.OpenSSH,
                                   serialization.NoEncryption()))


class SshConfigTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ssh-config-"))
        (self.dir / "host_key").write_bytes(openssh_key(ed25519.Ed25519PrivateKey.generate()))
        (self.dir / "ca_key").write_bytes(openssh_key(ed25519.Ed25519PrivateKey.generate()))

    def load(self, routes: list[dict[str, Any]], **settings: Any) -> Snapshot:
        config = {
            "insecure_server": True, "address": "127.0.0.1:8080",
            "authenticate_service_url": "http://authenticate.localhost:8080",
            "idp_provider": "oidc", "idp_provider_url": "http://127.0.0.1:9000",
            "idp_client_id": "gateway", "idp_client_secret": "secret",
            "ssh_address": "127.0.0.1:2222", "ssh_host_key_files": ["host_key"],
            "ssh_user_ca_key_file": "ca_key", **settings, "policy": routes}
        config = {k: v for k, v in config.items() if v is not None}
        path = self.dir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return load_snapshot(str(path), {})

    def problems(self, routes: list[dict[str, Any]], **settings: Any) -> dict[str, str]:
        with self.assertRaises(ConfigErrors) as caught:
            self.load(routes, **settings)
        return {p.path: p.message for p in caught.exception.problems}

    def test_ssh_route_is_kept_apart_from_the_data_plane(self) -> None:
        """An ssh:// route is in ``ssh_routes`` with its server and settings, and not in
        ``routes`` (the data plane would read its name as an HTTP host)."""
        snapshot = self.load([
            {"from": "ssh://db", "to": "ssh://127.0.0.1:2200",
             "ssh_upstream_host_keys": [f"[127.0.0.1]:2200 {HOST_KEY} comment"],
             "ssh_allow_port_forwarding": True, "ssh_certificate_ttl": "10m",
             "allowed_users": ["alice@example.com"]},
            {"from": "https://app.example.com", "to": "http://127.0.0.1:1",
             "allow_any_authenticated_user": True}])
        self.assertEqual([r.host for r in snapshot.routes], ["app.example.com"])
        (route,) = snapshot.ssh_routes
        assert route.ssh is not None
        self.assertEqual((route.ssh.name, route.ssh.host, route.ssh.port),
                         ("db", "127.0.0.1", 2200))
        self.assertTrue(route.ssh.allow_port_forwarding)
        self.assertEqual(route.ssh.certificate_ttl, 600.0)
        self.assertIsNone(route.ssh.recording)
        self.assertEqual(route.ssh.host_keys, (parse_host_key_line(HOST_KEY),))
        self.assertEqual(route.allowed_users, ("alice@example.com",))
        self.assertEqual(len(snapshot.ssh_material.host_keys), 1)
        self.assertIsNotNone(snapshot.ssh_material.user_ca_key)

    def test_defaults(self) -> None:
        snapshot = self.load([{"from": "ssh://db", "to": "ssh://127.0.0.1",
                               "ssh_upstream_host_key_tofu": True,
                               "allow_any_authenticated_user": True}])
        ssh = snapshot.ssh_routes[0].ssh
        assert ssh is not None
        self.assertEqual((ssh.port, ssh.certificate_ttl, ssh.allow_port_forwarding,
                          ssh.trust_on_first_use, ssh.record_input), (22, 300.0, False, True,
                                                                       False))

    def test_route_problems_name_their_key(self) -> None:
        problems = self.problems([
            {"from": "ssh://db", "to": "ssh://127.0.0.1:22",
             "allow_any_authenticated_user": True},
            {"from": "ssh://web", "to": "http://127.0.0.1:22",
             "ssh_upstream_host_keys": ["ssh-ed25519 AAAA"], "ssh_certificate_ttl": "2h",
             "prefix": "/x", "allow_any_authenticated_user": True},
            {"from": "https://app.example.com", "to": "http://127.0.0.1:1",
             "ssh_allow_port_forwarding": True, "allow_any_authenticated_user": True}])
        self.assertIn("host keys", problems["policy[0].ssh_upstream_host_keys"])
        self.assertIn("ssh:// upstream", problems["policy[1].to"])
        self.assertIn("not a ssh-ed25519 key", problems["policy[1].ssh_upstream_host_keys[0]"])
        self.assertIn("at most 1h", problems["policy[1].ssh_certificate_ttl"])
        self.assertIn("does not apply", problems["policy[1].prefix"])
        self.assertIn("only applies to an ssh:// route",
                      problems["policy[2].ssh_allow_port_forwarding"])

    def test_host_key_lines(self) -> None:
        key = parse_host_key_line(f"host1,host2 {HOST_KEY}")
        self.assertEqual(key.type, "ssh-ed25519")
        self.assertTrue(fingerprint(key.blob).startswith("SHA256:"))
        for bad in ("@cert-authority * " + HOST_KEY, "nonsense",
                    "ssh-rsa " + HOST_KEY.split()[1]):
            with self.assertRaises(ValueError):
                parse_host_key_line(bad)

    def test_keys_are_required_and_checked(self) -> None:
        problems = self.problems([], ssh_host_key_files=None, ssh_user_ca_key_file=None)
        self.assertIn("ssh-keygen", problems["ssh_host_key_files"])
        self.assertIn("TrustedUserCAKeys", problems["ssh_user_ca_key_file"])
        (self.dir / "rsa").write_bytes(openssh_key(rsa.generate_private_key(65537, 2048)))
        problems = self.problems([], ssh_host_key_files=["missing"],
                                 ssh_user_ca_key_file="rsa")
        self.assertIn("cannot read", problems["ssh_host_key_files[0]"])
        self.assertIn("ed25519 or ECDSA", problems["ssh_user_ca_key_file"])

    def test_inline_keys(self) -> None:
        text = openssh_key(ed25519.Ed25519PrivateKey.generate()).decode()
        snapshot = self.load([], ssh_host_key_files=None, ssh_host_keys=[text],
                             ssh_user_ca_key_file=None, ssh_user_ca_key=text)
        self.assertEqual(snapshot.ssh_material.host_keys, (text.strip().encode(),))

    def test_no_ssh_address_is_no_ssh(self) -> None:
        """Without ssh_address nothing is required; ssh routes are warned about."""
        snapshot = self.load([{"from": "ssh://db", "to": "ssh://127.0.0.1",
                               "ssh_upstream_host_key_tofu": True,
                               "allow_any_authenticated_user": True}],
                             ssh_address=None, ssh_host_key_files=None,
                             ssh_user_ca_key_file=None)
        self.assertEqual([w.path for w in snapshot.warnings], ["ssh_address"])

    def test_workers_serve_ssh(self) -> None:
        """With workers > 1 every worker serves SSH: nothing to warn about."""
        secret = "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI="
        snapshot = self.load([], workers=2, databroker_storage_type="kvstore",
                             databroker_storage_connection_string="kvstore://127.0.0.1:1/0",
                             shared_secret=secret, cookie_secret=secret)
        self.assertNotIn("ssh_address", [w.path for w in snapshot.warnings])
