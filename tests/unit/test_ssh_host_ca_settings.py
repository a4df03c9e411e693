"""A route's host CA settings (issue 31, ``ssh_upstream_host_ca``, ``_file``), its
``@revoked`` lines and revoked-keys file, and known_hosts host patterns: read with the
configuration, each problem at its key path."""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import tempfile
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import ConfigErrors
from gateway.config.known_hosts import (
    HostKey,
    fingerprint,
    hosts_match,
    parse_host_ca_line,
    parse_revoked_line,
)
from gateway.config.snapshot import Snapshot, load_snapshot
from gateway.config.ssh_krl import MAGIC
from tests.support.ssh_host_certs import blob_of, public_line, rsa_key


class HostCaSettingTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ssh-host-ca-"))
        for name in ("host_key", "user_ca"):
            (self.dir / name).write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption()))
        self.ca = public_line(ed25519.Ed25519PrivateKey.generate())
        self.rsa_ca = public_line(rsa_key())

    def load(self, **route: Any) -> Snapshot:
        config = {
            "insecure_server": True, "address": "127.0.0.1:8080",
            "authenticate_service_url": "http://authenticate.localhost:8080",
            "idp_provider": "oidc", "idp_provider_url": "http://127.0.0.1:9000",
            "idp_client_id": "gateway", "idp_client_secret": "secret",
            "ssh_address": "127.0.0.1:2222", "ssh_host_key_files": ["host_key"],
            "ssh_user_ca_key_file": "user_ca",
            "policy": [{"from": "ssh://db", "to": "ssh://db.example.test:2200",
                        "allow_any_authenticated_user": True, **route}]}
        path = self.dir / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        return load_snapshot(str(path), {})

    def entries(self, **route: Any) -> tuple[HostKey, ...]:
        ssh_route = self.load(**route).ssh_routes[0].ssh
        assert ssh_route is not None
        return ssh_route.host_keys

    def problems(self, **route: Any) -> dict[str, str]:
        with self.assertRaises(ConfigErrors) as caught:
            self.load(**route)
        return {p.path: p.message for p in caught.exception.problems}

    def test_forms_an_operator_pastes(self) -> None:
        """A .pub line (comment kept out), an @cert-authority line for the route's host,
        a multi-line string; with host keys beside them, either is trusted."""
        (entry,) = self.entries(ssh_upstream_host_ca=f"{self.ca} host-ca@example\n")
        self.assertTrue(entry.authority)
        self.assertEqual(entry.type, "ssh-ed25519")
        self.assertEqual(entry.blob, base64.b64decode(self.ca.split()[1]))
        found = self.entries(ssh_upstream_host_ca=[
            f"@cert-authority [*.example.test]:2200,!bad.example.test {self.ca}",
            "# our RSA CA", self.rsa_ca])
        self.assertEqual([(e.type, e.authority) for e in found],
                         [("ssh-ed25519", True), ("ssh-rsa", True)])
        found = self.entries(ssh_upstream_host_keys=[
            "[db.example.test]:2200 " + self.ca, f"@cert-authority [db*]:2200 {self.rsa_ca}"],
            ssh_upstream_host_ca=self.ca)
        self.assertEqual([(e.type, e.authority) for e in found],
                         [("ssh-ed25519", False), ("ssh-rsa", True), ("ssh-ed25519", True)])

    def test_the_file_form(self) -> None:
        """A known_hosts file shared by routes: @cert-authority lines for other hosts
        are skipped, one must be for this one."""
        (self.dir / "known_hosts").write_text(
            f"# fleet CAs\n@cert-authority *.other.test {self.rsa_ca}\n\n"
            f"@cert-authority [db.example.test]:* {self.ca}\n")
        (entry,) = self.entries(ssh_upstream_host_ca_file="known_hosts")
        self.assertEqual((entry.type, entry.authority), ("ssh-ed25519", True))
        (self.dir / "other").write_text(f"@cert-authority *.other.test {self.ca}\n")
        self.assertIn("other has no CA for [db.example.test]:2200", self.problems(
            ssh_upstream_host_ca_file="other")["policy[0].ssh_upstream_host_ca_file"])
        (self.dir / "bad").write_text(f"{self.ca}\ndb.example.test {self.ca}\n")
        self.assertIn("bad line 2: expected the CA's public key", self.problems(
            ssh_upstream_host_ca_file="bad")["policy[0].ssh_upstream_host_ca_file"])
        self.assertIn("cannot read", self.problems(
            ssh_upstream_host_ca_file="missing")["policy[0].ssh_upstream_host_ca_file"])

    def test_problems_name_their_key(self) -> None:
        problems = self.problems(
            ssh_upstream_host_ca=[self.ca, "ssh-dss AAAAB3NzaC1kc3MAAACBAP",
                                  f"@cert-authority *.other.test {self.ca}",
                                  "ssh-ed25519 AAAA!!", "@revoked * ssh-ed25519",
                                  "ssh-ed25519 " + self.rsa_ca.split()[1]],
            ssh_upstream_host_ca_file="x", ssh_upstream_host_key_tofu=True,
            ssh_upstream_host_keys=[f"@cert-authority nope {self.ca}"])
        where = "policy[0].ssh_upstream_host_ca"
        self.assertIn("TYPE one of ssh-ed25519", problems[f"{where}[1]"])
        self.assertIn("hosts are not [db.example.test]:2200 (the route's to:)",
                      problems[f"{where}[2]"])
        self.assertIn("not valid base64", problems[f"{where}[3]"])
        self.assertIn("expected `@revoked HOSTS TYPE BASE64`", problems[f"{where}[4]"])
        self.assertIn("not a ssh-ed25519 key", problems[f"{where}[5]"])
        self.assertIn("not both", problems[f"{where}_file"])
        self.assertIn("hosts are not", problems["policy[0].ssh_upstream_host_keys[0]"])
        self.assertIn("cannot be combined with a host CA",
                      self.problems(ssh_upstream_host_ca=self.ca, ssh_upstream_host_key_tofu=True)
                      ["policy[0].ssh_upstream_host_key_tofu"])
        self.assertIn("a host CA (ssh_upstream_host_ca)",
                      self.problems()["policy[0].ssh_upstream_host_keys"])
        self.assertIn("only applies to an ssh:// route", self.problems(
            **{"from": "https://app.example.com", "to": "http://127.0.0.1:1",
               "ssh_upstream_host_ca": self.ca})["policy[0].ssh_upstream_host_ca"])

    def revoked(self, **route: Any) -> frozenset[bytes]:
        ssh_route = self.load(**route).ssh_routes[0].ssh
        assert ssh_route is not None
        return ssh_route.revoked.keys

    def test_revoked_lines(self) -> None:
        """``@revoked HOSTS TYPE BASE64`` in either setting or a shared file: kept apart
        from the trusted entries (a route with a CA and a revoked host key still has its
        CA, and one with trust on first use keeps it)."""
        stolen = ed25519.Ed25519PrivateKey.generate()
        line = public_line(stolen)
        blob = blob_of(stolen)
        self.assertEqual(self.revoked(ssh_upstream_host_ca=[
            self.ca, f"@revoked [db.example.test]:2200 {line} stolen laptop"]), {blob})
        self.assertEqual(self.revoked(ssh_upstream_host_key_tofu=True,
                                      ssh_upstream_host_keys=f"@revoked * {line}"), {blob})
        self.assertEqual(self.entries(ssh_upstream_host_key_tofu=True,
                                      ssh_upstream_host_keys=f"@revoked * {line}"), ())
        rsa_line = public_line(rsa_key())
        (self.dir / "known_hosts").write_text(
            f"@cert-authority * {self.ca}\n@revoked *.other.test {line}\n"
            f"@revoked [db.example.test]:2200 {rsa_line}\n")
        self.assertEqual(self.revoked(ssh_upstream_host_ca_file="known_hosts"),
                         {blob_of(rsa_key())})  # the other host's line is skipped
        self.assertEqual(parse_revoked_line(f"@revoked other {line}", "db", 22), None)

    def test_revoked_problems(self) -> None:
        stolen = public_line(ed25519.Ed25519PrivateKey.generate())
        problems = self.problems(
            ssh_upstream_host_keys=[f"@revoked *.other.test {stolen}", "@revoked * x",
                                    f"@revoked * ssh-dss {stolen.split()[1]}"])
        where = "policy[0].ssh_upstream_host_keys"
        self.assertIn("hosts are not [db.example.test]:2200", problems[f"{where}[0]"])
        self.assertIn("expected `@revoked HOSTS TYPE BASE64`", problems[f"{where}[1]"])
        self.assertIn("'ssh-dss' is not a key type", problems[f"{where}[2]"])
        self.assertIn("needs the server's host keys", self.problems(
            ssh_upstream_host_keys=f"@revoked * {stolen}")[where])

    def test_a_revoked_keys_file(self) -> None:
        """``ssh_upstream_revoked_keys_file``: an OpenSSH KRL or public keys one a line
        (OpenSSH's RevokedHostKeys takes both); a bad one names the setting."""
        stolen = public_line(ed25519.Ed25519PrivateKey.generate())
        (self.dir / "revoked.pub").write_text(f"# db1, stolen\n{stolen} db1\n")
        ssh_route = self.load(ssh_upstream_host_ca=self.ca,
                              ssh_upstream_revoked_keys_file="revoked.pub").ssh_routes[0].ssh
        assert ssh_route is not None
        self.assertEqual(ssh_route.revoked.keys, {base64.b64decode(stolen.split()[1])})
        krl = (MAGIC + struct.pack(">IQQQ", 1, 1, 0, 0) + struct.pack(">II", 0, 0)
               + bytes([1]) + struct.pack(">I", 8 + 1 + 4 + 16) + struct.pack(">II", 0, 0)
               + bytes([0x21]) + struct.pack(">IQQ", 16, 40, 49))
        (self.dir / "revoked.krl").write_bytes(krl)
        ssh_route = self.load(ssh_upstream_host_ca=self.ca,
                              ssh_upstream_revoked_keys_file="revoked.krl").ssh_routes[0].ssh
        assert ssh_route is not None
        self.assertTrue(ssh_route.revoked.certificate(b"any CA", 45, ""))
        self.assertFalse(ssh_route.revoked.certificate(b"any CA", 50, ""))
        (self.dir / "broken.krl").write_bytes(krl[:-3])
        where = "policy[0].ssh_upstream_revoked_keys_file"
        self.assertIn("broken.krl: the KRL ends early", self.problems(
            ssh_upstream_host_ca=self.ca, ssh_upstream_revoked_keys_file="broken.krl")[where])
        self.assertIn("cannot read", self.problems(
            ssh_upstream_host_ca=self.ca, ssh_upstream_revoked_keys_file="missing")[where])

    def test_a_key_the_routes_settings_trust_and_revoke_is_an_error(self) -> None:
        """Both lines in the route's own settings: the config is refused at the
        @revoked line, which names the line trusting the key."""
        stolen = public_line(ed25519.Ed25519PrivateKey.generate())
        where = "policy[0].ssh_upstream_host_keys"
        problems = self.problems(ssh_upstream_host_keys=[
            "[db.example.test]:2200 " + stolen, f"@revoked [db*]:2200 {stolen}"])
        self.assertEqual(problems[f"{where}[1]"],
                         f"revokes {fingerprint(base64.b64decode(stolen.split()[1]))}, "
                         f"which {where}[0] trusts as a host key: take one of the two "
                         "lines out")
        problems = self.problems(ssh_upstream_host_ca=[self.ca],
                                 ssh_upstream_host_keys=[f"@revoked * {self.ca}"])
        self.assertIn("which policy[0].ssh_upstream_host_ca[0] trusts as a host CA",
                      problems[f"{where}[0]"])

    def test_revoking_a_trusted_key_in_a_file_wins_with_a_warning(self) -> None:
        """A fleet's shared known_hosts file gains an @revoked line for a CA its
        @cert-authority lines still name, or a revoked keys file names a key the
        route's settings trust: the reload takes it (refusing the config would keep
        the running one, which trusts the key), the key is refused, and the warning
        names both lines."""
        stolen = public_line(ed25519.Ed25519PrivateKey.generate())
        (self.dir / "known_hosts").write_text(f"@cert-authority * {self.ca}\n"
                                              f"@revoked * {self.ca}\n")
        (self.dir / "revoked.pub").write_text(f"{stolen}\n")
        snapshot = self.load(ssh_upstream_host_ca_file="known_hosts",
                             ssh_upstream_revoked_keys_file="revoked.pub",
                             ssh_upstream_host_keys=["[db.example.test]:2200 " + stolen])
        ssh_route = snapshot.ssh_routes[0].ssh
        assert ssh_route is not None
        self.assertEqual(ssh_route.revoked.keys, {base64.b64decode(self.ca.split()[1]),
                                                  base64.b64decode(stolen.split()[1])})
        warnings = {w.path: w.message for w in snapshot.warnings}
        self.assertIn("which policy[0].ssh_upstream_host_keys[0] trusts as a host key: it "
                      "is refused", warnings["policy[0].ssh_upstream_revoked_keys_file"])
        self.assertIn("which policy[0].ssh_upstream_host_ca_file (known_hosts line 1) "
                      "trusts as a host CA: it is refused", warnings[
                          "policy[0].ssh_upstream_host_ca_file (known_hosts line 2)"])
        # the fleet's file trusts the CA, the route's setting revokes it
        (self.dir / "known_hosts").write_text(f"@cert-authority * {self.ca}\n")
        snapshot = self.load(ssh_upstream_host_ca_file="known_hosts",
                             ssh_upstream_host_keys=[f"@revoked * {self.ca}"])
        self.assertIn("trusts as a host CA: it is refused", {
            w.path: w.message for w in snapshot.warnings}[
                "policy[0].ssh_upstream_host_keys[0]"])

    def test_hosts_patterns(self) -> None:
        """known_hosts' host field as OpenSSH reads it: ``[host]:port`` off port 22,
        wildcards, a negation that wins, hashed names."""
        self.assertTrue(hosts_match("db.example.test", "DB.example.test", 22))
        self.assertFalse(hosts_match("db.example.test", "db.example.test", 2200))
        self.assertTrue(hosts_match("[db.example.test]:2200", "db.example.test", 2200))
        self.assertTrue(hosts_match("*.example.test,10.0.0.?", "10.0.0.5", 22))
        self.assertFalse(hosts_match("*.example.test,!db.*", "db.example.test", 22))
        self.assertFalse(hosts_match("db.example.tes", "db.example.test", 22))
        self.assertFalse(hosts_match("d.", "db", 22))  # "." is no wildcard
        self.assertTrue(hosts_match("d*b*.*.t?st", "db.example.test", 22))
        self.assertFalse(hosts_match("*b*z*", "db.example.test", 22))
        # many stars against a long name that does not match: quick, not exponential
        self.assertFalse(hosts_match("*a" * 60 + "!", "a" * 2000, 22))
        salt = b"0123456789abcdefghij"
        digest = hmac.new(salt, b"db.example.test", hashlib.sha1).digest()
        hashed = f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"
        self.assertTrue(hosts_match(hashed, "db.example.test", 22))
        self.assertFalse(hosts_match(hashed, "other.example.test", 22))
        for broken in ("|1|", "|1|!!|!!", "|1|a|b|c"):
            self.assertFalse(hosts_match(broken, "db.example.test", 22))
        self.assertIsNone(parse_host_ca_line(f"@cert-authority other {self.ca}", "db", 22))
