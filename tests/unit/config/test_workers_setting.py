"""``workers``: its syntax, and the settings that must hold before several processes
may share the data plane (nothing a user's next request needs may be per process)."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from gateway.config.values import available_cpus

from .helpers import IDENTITY, SECRET, base_config, errors_of, load

KV = {"databroker_storage_type": "kvstore",
      "databroker_storage_connection_string": "kvstore://127.0.0.1:6379/0",
      "shared_secret": SECRET, "cookie_secret": SECRET}


class WorkersSettingTests(SynchronousTestCase):
    def test_default_one_and_auto_per_cpu(self) -> None:
        self.assertEqual(load(base_config()).options.workers, 1)
        self.assertEqual(load(base_config(workers="auto", **KV)).options.workers,
                         available_cpus())
        self.assertEqual(load(base_config(workers=2, **KV)).options.workers, 2)
        self.assertEqual(load(base_config(**KV), {"WORKERS": "3"}).options.workers, 3)

    def test_bad_values_name_the_key(self) -> None:
        for value in (0, -1, "many", 257, True, 1.5):
            errors = errors_of(base_config(workers=value, **KV))
            self.assertEqual(len(errors), 1, (value, errors))
            self.assertTrue(errors[0].startswith("workers: must be a number of processes "
                                                 "from 1 to 256, or auto"), errors)

    def test_memory_storage_would_split_sessions(self) -> None:
        errors = errors_of(base_config(workers=2))
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("workers: is 2 with databroker_storage_type memory", errors[0])
        self.assertIn("set databroker_storage_type to kvstore", errors[0])

    def test_signing_key_needed_when_routes_sign_in(self) -> None:
        config = base_config(workers=2, **KV, **IDENTITY,
                             policy=[{"from": "https://app.example.com",
                                      "to": "http://127.0.0.1:9000",
                                      "allowed_users": ["a@example.com"]}])
        errors = errors_of(config)
        self.assertEqual(len(errors), 1, errors)
        self.assertIn("workers: is 2 but signing_key is not set", errors[0])

    def test_autocert_and_split_services_refused(self) -> None:
        errors = errors_of({**base_config(workers=2, **KV), "insecure_server": False,
                            "autocert": True})
        self.assertTrue(any(e.startswith("workers: is 2 with autocert") for e in errors),
                        errors)
        errors = errors_of(base_config(workers=2, services="authorize", **KV, **IDENTITY))
        self.assertTrue(any("workers: is 2, but services is authorize" in e
                            for e in errors), errors)
