"""Hot reload: file watching, atomic swap, keeping the running config on errors."""

from __future__ import annotations

import os
import tempfile

import trustme
import yaml
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.trial.unittest import SynchronousTestCase

from gateway.config import Snapshot, load_snapshot
from gateway.config.running import ConfigSource

from .helpers import base_config, write


def bump_mtime(path: str) -> None:
    """Make a change visible even within the file system's timestamp granularity."""
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


class ConfigSourceTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.path = write(self.dir, "config.yaml", yaml.safe_dump(base_config()))
        self.clock = Clock()
        self.clock.advance(1000)
        self.source = ConfigSource(self.path, load_snapshot(self.path, {}), self.clock,
                                   environ={}, poll_interval=1.0)
        self.seen: list[Snapshot] = []
        self.source.subscribe(self.seen.append)
        self.source.startService()
        self.addCleanup(self.source.stopService)

    def edit(self, **changes: object) -> None:
        config = base_config()
        config.update(changes)
        with open(self.path, "w") as handle:
            yaml.safe_dump(config, handle)
        bump_mtime(self.path)

    def test_file_edit_swaps_snapshot(self) -> None:
        """Editing the file swaps in a new snapshot at the next poll and notifies."""
        before = self.source.current
        self.edit(cookie_name="_changed")
        self.clock.advance(1)
        self.assertEqual(self.source.current.options.cookie_name, "_changed")
        self.assertEqual(self.seen, [self.source.current])
        self.assertIsNot(self.source.current, before)
        self.assertTrue(self.source.status.last_reload_success)
        self.assertEqual(self.source.status.last_reload_success_timestamp, 1001.0)
        self.assertEqual(self.source.status.checksum, self.source.current.checksum)
        self.assertNotEqual(self.source.current.checksum, before.checksum)

    def test_invalid_edit_keeps_running_config(self) -> None:
        """An invalid edit is logged with its problems; the running snapshot stays."""
        before = self.source.current
        self.edit(services="blue")
        with capturedLogs() as events:
            self.clock.advance(1)
        self.assertIs(self.source.current, before)
        self.assertEqual(self.seen, [])
        self.assertFalse(self.source.status.last_reload_success)
        self.assertEqual(self.source.status.checksum, before.checksum)
        errors = [e for e in events if e.get("errors")]
        self.assertEqual(errors[0]["errors"], [
            "services: config: blue is an invalid service type; valid values: all, "
            "authenticate, authorize, databroker, proxy"])
        self.edit(cookie_name="_fixed")
        self.clock.advance(1)
        self.assertEqual(self.source.current.options.cookie_name, "_fixed")
        self.assertTrue(self.source.status.last_reload_success)

    def test_unchanged_file_does_not_reload(self) -> None:
        """Polling without changes neither reloads nor notifies."""
        self.clock.advance(5)
        self.assertEqual(self.seen, [])

    def test_explicit_reload_same_content(self) -> None:
        """A SIGHUP-style reload of identical content succeeds without notifying."""
        self.assertTrue(self.source.reload("SIGHUP"))
        self.assertEqual(self.seen, [])

    def test_bootstrap_only_settings_keep_first_value(self) -> None:
        """Changing `services` or a dataplane admin option is refused until restart."""
        self.edit(services="proxy", dataplane_admin_address="127.0.0.1:9901",
                  shared_secret="a2trazMya2trazMya2trazMya2trazMya2trazMya2s=",
                  cookie_secret="a2trazMya2trazMya2trazMya2trazMya2trazMya2s=",
                  authenticate_service_url="https://auth.example")
        self.clock.advance(1)
        self.assertEqual(self.source.current.options.services, "all")
        self.assertEqual(self.source.current.options.dataplane_admin_address, "")
        self.assertEqual(self.source.current.options.authenticate_service_url,
                         "https://auth.example")

    def test_referenced_file_change_reloads(self) -> None:
        """A change to a referenced certificate file reloads the snapshot."""
        ca = trustme.CA()
        write(self.dir, "ca.pem", ca.cert_pem.bytes())
        self.edit(client_ca_file="ca.pem")
        self.clock.advance(1)
        first = self.source.current.material.client_ca
        self.assertEqual(first, ca.cert_pem.bytes())
        other = trustme.CA()
        write(self.dir, "ca.pem", other.cert_pem.bytes())
        bump_mtime(os.path.join(self.dir, "ca.pem"))
        self.clock.advance(1)
        self.assertEqual(self.source.current.material.client_ca, other.cert_pem.bytes())
        self.assertEqual(len(self.seen), 2)

    def test_subscriber_failure_is_contained(self) -> None:
        """A failing subscriber neither blocks the swap nor later subscribers."""
        def broken(_: Snapshot) -> None:
            raise RuntimeError("boom")

        later: list[Snapshot] = []
        self.source._subscribers.insert(0, broken)
        self.source.subscribe(later.append)
        self.edit(cookie_name="_x")
        self.clock.advance(1)
        self.assertEqual(len(later), 1)
        self.assertEqual(len(self.flushLoggedErrors(RuntimeError)), 1)

    def test_stop_stops_polling(self) -> None:
        """After stopService, edits are not picked up."""
        self.source.stopService()
        self.edit(cookie_name="_late")
        self.clock.advance(5)
        self.assertEqual(self.source.current.options.cookie_name, "_gateway")
        self.source.startService()


class FileStatesTests(SynchronousTestCase):
    def test_deleted_and_recreated_file(self) -> None:
        """A watched file that disappears and comes back counts as a change."""
        from gateway.config.running import file_states

        path = write(tempfile.mkdtemp(), "x", "1")
        first = file_states(frozenset({path}))
        os.unlink(path)
        self.assertNotEqual(file_states(frozenset({path})), first)
        write(os.path.dirname(path), "x", "1")
        self.assertIsNotNone(file_states(frozenset({path}))[0][1])
