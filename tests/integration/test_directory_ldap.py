"""The LDAP directory provider against a real, private ``slapd`` on loopback (on the real
reactor: trial's TestCase spins it): transitive groups, each failure's message, StartTLS
and LDAPS with the project's client TLS contexts, cancellation with ``addTimeout``, and
directories larger than the server's size limit."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import trustme
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.trial.unittest import TestCase

from gateway.directory import Directory, DirectoryError, provider_for
from tests.conftest import _require_binary
from tests.support.slapd import SUFFIX, Slapd, sample_ldif, slapd

pytestmark = pytest.mark.integration

GROUPS = f"ou=groups,{SUFFIX}"


def group_dn(name: str) -> str:
    return f"cn={name},{GROUPS}"


class SlapdTestCase(TestCase):
    timeout = 60
    tls = False
    extra_people = 0
    size_limit: int | None = None
    service_limits: str | None = None

    def setUp(self) -> None:
        _require_binary("slapd", "apt-get install -y slapd ldap-utils")
        self.tmp = Path(tempfile.mkdtemp(prefix="slapd-test-"))
        stack = contextlib.ExitStack()
        self.addCleanup(stack.close)
        tls = None
        if self.tls:
            self.ca = trustme.CA()
            self.ca.issue_cert("127.0.0.1", "ldap.example.test") \
                .private_key_and_cert_chain_pem.write_to_path(str(self.tmp / "server.pem"))
            tls = (self.tmp / "server.pem", self.tmp / "server.pem")
        self.server: Slapd = stack.enter_context(slapd(
            self.tmp, sample_ldif(self.extra_people), tls=tls, size_limit=self.size_limit,
            service_limits=self.service_limits))

    def account(self, **fields: Any) -> str:
        """A base64 JSON service account for the service user; ``fields`` override."""
        base = {"url": self.server.url, "bind_dn": self.server.service_dn,
                "password": self.server.service_password, "base_dn": SUFFIX}
        text = json.dumps({k: v for k, v in {**base, **fields}.items() if v is not None})
        return base64.b64encode(text.encode()).decode()

    async def fetch(self, **fields: Any) -> Directory:
        provider = provider_for(self.account(**fields), reactor)
        assert provider is not None
        result: Directory = await provider.fetch()
        return result

    async def fetch_error(self, **fields: Any) -> str:
        try:
            await self.fetch(**fields)
        except DirectoryError as exc:
            message = str(exc)
            self.assertNotIn(self.server.service_password, message)
            return message
        raise AssertionError(f"fetch with {fields} did not fail")


class FetchTests(SlapdTestCase):
    async def test_users_with_transitive_groups(self) -> None:
        directory = await self.fetch()
        users = {u.id: u for u in directory.users}
        self.assertEqual(set(users), {"alice", "bob", "carol", "dave", "erin"})
        groups = {
            "alice": {"engineering", "ops", "everyone"},
            "bob": {"backend", "engineering"},
            "carol": {"platform", "backend", "engineering"},
            "dave": {"admins", "ops", "everyone"},  # groupOfUniqueNames and posixGroup
            "erin": {"loop-a", "loop-b"},  # a membership cycle
        }
        for uid, names in groups.items():
            self.assertEqual(users[uid].group_ids, tuple(sorted(group_dn(n) for n in names)),
                             uid)
        self.assertEqual((users["alice"].email, users["alice"].name),
                         ("alice@example.test", "Alice Liddell"))
        self.assertEqual({g.id: g.name for g in directory.groups},
                         {group_dn(n): n for n in ("engineering", "backend", "platform",
                                                   "loop-a", "loop-b", "admins", "ops",
                                                   "everyone")})

    async def test_separate_bases_and_filters(self) -> None:
        directory = await self.fetch(base_dn=None, user_base_dn=f"ou=people,{SUFFIX}",
                                     group_base_dn=GROUPS, user_filter="(uid=*o*)",
                                     group_filter="(objectClass=posixGroup)")
        self.assertEqual({u.id: u.group_ids for u in directory.users},
                         {"bob": (), "carol": ()})
        self.assertEqual([g.name for g in directory.groups], ["ops"])

    async def test_wrong_password(self) -> None:
        message = await self.fetch_error(password="not-the-password")
        self.assertEqual(message, f"directory {self.server.url}: bind as "
                         f"{self.server.service_dn}: invalid credentials: wrong bind_dn or "
                         "password")

    async def test_unreachable_server(self) -> None:
        with socket.socket() as probe:  # a port nobody listens on
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        message = await self.fetch_error(url=f"ldap://127.0.0.1:{port}")
        self.assertEqual(message, f"directory ldap://127.0.0.1:{port}: connect: connection "
                                  "refused (is the server running and listening there?)")

    async def test_bad_base_dn(self) -> None:
        message = await self.fetch_error(user_base_dn=f"ou=nobody,{SUFFIX}")
        self.assertIn(f"search users under ou=nobody,{SUFFIX}: noSuchObject", message)
        self.assertIn("check user_base_dn", message)

    async def test_anonymous_sees_nothing_here(self) -> None:
        """Without bind_dn there is no bind; this server hides everything from anonymous."""
        message = await self.fetch_error(bind_dn=None, password=None)
        self.assertIn("noSuchObject", message)

    async def test_start_tls_on_a_server_without_tls(self) -> None:
        message = await self.fetch_error(start_tls=True, tls_skip_verify=True)
        self.assertIn(": StartTLS: the server refused", message)


class TLSTests(SlapdTestCase):
    tls = True

    def pem(self, ca: trustme.CA | None = None) -> str:
        return (ca or self.ca).cert_pem.bytes().decode()

    async def test_start_tls_with_the_right_ca(self) -> None:
        directory = await self.fetch(start_tls=True, ca=self.pem())
        self.assertEqual(len(directory.users), 5)
        # the traffic really was TLS: slapd logs the StartTLS operation
        self.assertIn("EXT oid=1.3.6.1.4.1.1466.20037", self.server.process.log_text())

    async def test_start_tls_with_a_stranger_ca(self) -> None:
        message = await self.fetch_error(start_tls=True, ca=self.pem(trustme.CA()))
        self.assertIn("TLS handshake failed: certificate verify failed", message)
        self.assertIn("check ca / ca_file", message)

    async def test_ldaps(self) -> None:
        ca_file = self.tmp / "ca.pem"
        ca_file.write_text(self.pem())
        directory = await self.fetch(url=self.server.ldaps_url, ca_file=str(ca_file),
                                     tls_server_name="ldap.example.test")
        self.assertEqual(len(directory.groups), 8)

    async def test_ldaps_name_mismatch_and_skip_verify(self) -> None:
        message = await self.fetch_error(url=self.server.ldaps_url, ca=self.pem(),
                                         tls_server_name="other.example.test")
        self.assertIn("TLS: the server certificate is not valid for other.example.test",
                      message)
        directory = await self.fetch(url=self.server.ldaps_url, ca=self.pem(trustme.CA()),
                                     tls_skip_verify=True)
        self.assertEqual(len(directory.users), 5)

    async def test_a_frozen_server_is_cut_off_by_the_timeout(self) -> None:
        """SIGSTOP: the kernel accepts the connection, nothing answers the TLS handshake."""
        pid = self.server.process.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        self.addCleanup(os.kill, pid, signal.SIGCONT)
        provider = provider_for(self.account(url=self.server.ldaps_url, ca=self.pem()),
                                reactor)
        assert provider is not None
        started = time.monotonic()
        with self.assertRaises(defer.TimeoutError):
            await provider.fetch().addTimeout(0.5, reactor)
        self.assertLess(time.monotonic() - started, 3)


class CancellationTests(TestCase):
    timeout = 30

    async def test_timeout_closes_the_connection(self) -> None:
        """A listening socket that never answers: the bind waits until addTimeout cancels
        the fetch, which must close the connection (the peer then sees EOF or a reset)."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            port = listener.getsockname()[1]
            account = {"url": f"ldap://127.0.0.1:{port}", "bind_dn": "cn=x",
                       "password": "pw", "base_dn": SUFFIX}
            provider = provider_for(json.dumps(account), reactor)
            assert provider is not None
            started = time.monotonic()
            with self.assertRaises(defer.TimeoutError):
                await provider.fetch().addTimeout(0.5, reactor)
            self.assertLess(time.monotonic() - started, 3)
            await deferLater(reactor, 0.1, lambda: None)  # let the reactor close the socket
            peer, _ = listener.accept()
            with peer:
                peer.settimeout(2)
                received = b""
                try:
                    while chunk := peer.recv(4096):
                        received += chunk
                except ConnectionResetError:
                    pass
                self.assertTrue(received.startswith(b"\x30"), received)  # the bind was sent


class LargeDirectoryTests(SlapdTestCase):
    """1,500 generated users: more than slapd's default size limit (500 per search)."""

    extra_people = 1500
    # the service account may page through everything (each page stays under 500)
    service_limits = "size.prtotal=unlimited"

    async def test_paged_search_fetches_every_user(self) -> None:
        directory = await self.fetch()  # pages of 500
        self.assertEqual(len(directory.users), 1505)
        self.assertEqual(len({u.id for u in directory.users}), 1505)
        directory = await self.fetch(page_size=120)
        self.assertEqual(len(directory.users), 1505)

    async def test_without_paging_the_size_limit_is_an_error_not_a_partial_directory(
            self) -> None:
        message = await self.fetch_error(page_size=0)
        self.assertIn("search users under dc=example,dc=test: sizeLimitExceeded after 500 "
                      "users", message)
        self.assertIn("size.prtotal=unlimited", message)


class DefaultLimitsTests(SlapdTestCase):
    """slapd's defaults also cap paged searches at 500 in total: an operator must lift the
    limit for the service account, and the error says how."""

    extra_people = 1500

    async def test_the_total_limit_is_reported(self) -> None:
        message = await self.fetch_error()
        self.assertIn("sizeLimitExceeded after 500 users", message)
        self.assertIn(f'limits dn.exact="{self.server.service_dn}" size.prtotal=unlimited',
                      message)


class RaisedSizeLimitTests(SlapdTestCase):
    """The other server-side fix: a global size limit above the directory's size."""

    extra_people = 1500
    size_limit = 5000

    async def test_everything_in_one_unpaged_search(self) -> None:
        directory = await self.fetch(page_size=0)
        self.assertEqual(len(directory.users), 1505)


class WrongPortTests(SlapdTestCase):
    tls = True

    async def test_scheme_and_port_that_do_not_match(self) -> None:
        message = await self.fetch_error(url=f"ldaps://127.0.0.1:{self.server.port}",
                                         tls_skip_verify=True)
        self.assertIn(": bind as cn=gateway,ou=services,dc=example,dc=test: the server closed "
                      "the connection during the TLS handshake; does this port speak TLS",
                      message)
        message = await self.fetch_error(url=f"ldap://127.0.0.1:{self.server.ldaps_port}")
        self.assertIn("the server closed the connection (a port that expects TLS", message)
