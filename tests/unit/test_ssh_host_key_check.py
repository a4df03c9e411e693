"""The service's upstream host-key check (``SshService._host_key_check``): a route's
host CAs and host keys kept apart, the log line naming a foreign CA as the certificate's
CA, and an answer given at once (the key exchange cannot wait)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from twisted.logger import LogEvent, formatEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.known_hosts import HostKey, fingerprint
from gateway.config.ssh import SshRoute
from gateway.ssh.service import SshService

CA = b"\x00\x00\x00\x0bssh-ed25519" + b"\x00\x00\x00\x20" + b"C" * 32
KEY = b"\x00\x00\x00\x0bssh-ed25519" + b"\x00\x00\x00\x20" + b"K" * 32
OTHER = b"\x00\x00\x00\x0bssh-ed25519" + b"\x00\x00\x00\x20" + b"O" * 32


class HostKeyCheckTests(SynchronousTestCase):
    def setUp(self) -> None:
        ssh = SshRoute("db", "127.0.0.1", 22, (HostKey("ssh-ed25519", CA, True),
                                               HostKey("ssh-ed25519", KEY, False)))
        route: Any = SimpleNamespace(ssh=ssh)
        service: Any = SimpleNamespace(records=None)
        self.check = SshService._host_key_check(service, route, None)
        self.logged: list[str] = []

        def observe(event: LogEvent) -> None:
            if event.get("log_namespace") == "gateway.ssh":
                self.logged.append(formatEvent(event))
        globalLogPublisher.addObserver(observe)
        self.addCleanup(globalLogPublisher.removeObserver, observe)

    def test_a_ca_is_no_host_key_and_a_host_key_no_ca(self) -> None:
        self.assertIs(self.check(KEY, False), True)
        self.assertIs(self.check(CA, True), True)
        self.assertIs(self.check(CA, False), False)  # a CA shown as a plain host key
        self.assertIs(self.check(KEY, True), False)  # a host key signing a certificate

    def test_a_foreign_ca_is_named_as_the_certificates_ca(self) -> None:
        self.assertIs(self.check(OTHER, True), False)
        self.assertEqual(len(self.logged), 1)
        line = self.logged[0]
        self.assertIn(f"the host certificate's CA {fingerprint(OTHER)} is not one route db "
                      "trusts", line)
        self.assertNotIn("host key", line)
