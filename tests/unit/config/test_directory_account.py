"""idp_service_account: an LDAP account is checked at load time like any other setting;
a bad one on reload keeps the running snapshot; other providers' accounts pass as they
are."""

from __future__ import annotations

import base64
import json
import os
import tempfile

import yaml
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from gateway.config import load_snapshot
from gateway.config.running import ConfigSource

from .helpers import base_config, errors_of, load, write

LDAP = {"url": "ldap://ldap.example.test", "bind_dn": "cn=gateway,dc=example,dc=test",
        "password": "pw", "base_dn": "dc=example,dc=test"}


def account(**fields: object) -> str:
    return base64.b64encode(json.dumps({**LDAP, **fields}).encode()).decode()


class DirectoryAccountTests(SynchronousTestCase):
    def test_a_valid_ldap_account_loads(self) -> None:
        snapshot = load(base_config(idp_service_account=account()))
        self.assertEqual(snapshot.options.idp_service_account, account())

    def test_a_bad_ldap_account_is_an_error_naming_the_field(self) -> None:
        self.assertEqual(errors_of(base_config(idp_service_account=account(url="http://x"))),
                         ["idp_service_account: url: must be ldap:// or ldaps://"])
        self.assertEqual(errors_of(base_config(idp_service_account=account(page_size="all"))),
                         ["idp_service_account: page_size: must be a whole number from 0 (no "
                          "paging) to 100000, got 'all'"])

    def test_files_are_read_next_to_the_config(self) -> None:
        directory = tempfile.mkdtemp()
        write(directory, "ldap-password", "from-file\n")
        fields = {k: v for k, v in LDAP.items() if k != "password"}
        load(base_config(idp_service_account=json.dumps(
            {**fields, "password_file": "ldap-password"})), directory=directory)
        errors = errors_of(base_config(idp_service_account=json.dumps(
            {**fields, "password_file": "missing"})), directory=directory)
        self.assertEqual(errors, [f"idp_service_account: password_file: cannot read "
                                  f"{os.path.join(directory, 'missing')}: No such file or "
                                  "directory"])

    def test_other_providers_accounts_are_not_checked(self) -> None:
        google = base64.b64encode(b'{"type": "service_account", "private_key": "x"}').decode()
        for value in (google, "an-opaque-api-token"):
            load(base_config(idp_service_account=value))

    def test_a_bad_account_on_reload_keeps_the_running_config(self) -> None:
        directory = tempfile.mkdtemp()
        path = write(directory, "config.yaml",
                     yaml.safe_dump(base_config(idp_service_account=account())))
        clock = Clock()
        source = ConfigSource(path, load_snapshot(path, {}), clock, environ={},
                              poll_interval=1.0)
        source.startService()
        self.addCleanup(source.stopService)
        before = source.current
        write(directory, "config.yaml",
              yaml.safe_dump(base_config(idp_service_account=account(bind_dn=""))))
        stat = os.stat(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        with capturedLogs() as events:
            clock.advance(1)
        self.assertIs(source.current, before)
        errors = [e["errors"] for e in events if e.get("errors")]
        self.assertEqual(errors, [["idp_service_account: bind_dn: required with password"]])
