"""The test-only switch that turns the per-address penalty off
(``GATEWAY_TEST_ONLY_NO_PENALTY=1``, for the h2spec conformance test): off unless the
environment holds exactly ``1``, and said out loud when on."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.dataplane import penalty
from gateway.dataplane.core import ProxyCore
from gateway.dataplane.penalty import TEST_ONLY_SWITCH, Penalties, switched_off
from gateway.dataplane.routing.plan import build_plan

from .config.helpers import base_config, load

SNAPSHOT = load(base_config(policy=[{
    "from": "https://app.example.com", "to": "http://127.0.0.1:9000/",
    "allow_public_unauthenticated_access": True}]))
CLIENT = "192.0.2.1"


def cut_three_times(p: Penalties) -> float | None:
    """Three quick cuts: the third starts a penalty when the penalty is on."""
    p.strike(CLIENT, "rapid_reset", 0.0)
    p.strike(CLIENT, "rapid_reset", 1.0)
    return p.strike(CLIENT, "rapid_reset", 2.0)


class SwitchTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.logged: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(self.logged.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.logged.append)

    def warnings(self) -> list[dict[str, Any]]:
        return [e for e in self.logged
                if e.get("log_level") == LogLevel.warn and e.get("switch") == TEST_ONLY_SWITCH]

    def test_off_by_default_in_the_daemon(self) -> None:
        """A core built as the daemon builds it, in an environment without the
        variable, refuses a client cut three times, and says nothing of the switch."""
        self.patch(os, "environ", {k: v for k, v in os.environ.items()
                                   if k != TEST_ONLY_SWITCH})
        core = ProxyCore(MemoryReactorClock(), build_plan(SNAPSHOT), tls=False)
        self.assertFalse(core.penalties.off)
        self.assertEqual(cut_three_times(core.penalties), penalty.PENALTY)
        self.assertTrue(core.penalties.refuses(CLIENT, 2.5))
        self.assertEqual(self.warnings(), [])

    def test_only_exactly_1_turns_it_off(self) -> None:
        self.assertFalse(switched_off({}))
        for value in ("", "0", "false", "no", "true", "yes", " 1", "1 ", "01", "on"):
            self.assertFalse(switched_off({TEST_ONLY_SWITCH: value}), value)
        self.assertTrue(switched_off({TEST_ONLY_SWITCH: "1"}))

    def test_switched_off_no_strike_no_refusal_and_a_warning(self) -> None:
        p = Penalties({TEST_ONLY_SWITCH: "1"})
        self.assertIsNone(cut_three_times(p))
        self.assertFalse(p.refuses(CLIENT, 2.5))
        self.assertEqual(len(p), 0)
        (warning,) = self.warnings()
        self.assertIn("conformance tests only", warning["log_format"])

    def test_read_from_the_process_environment(self) -> None:
        self.patch(os, "environ", {**os.environ, TEST_ONLY_SWITCH: "1"})
        core = ProxyCore(MemoryReactorClock(), build_plan(SNAPSHOT), tls=False)
        self.assertTrue(core.penalties.off)
        self.assertIsNone(cut_three_times(core.penalties))

    def test_not_a_setting(self) -> None:
        """No option a config file can set turns the penalty off."""
        names = [field.name for field in dataclasses.fields(SNAPSHOT.options)]
        self.assertTrue(names)
        self.assertEqual([n for n in names if "penalt" in n or "test_only" in n], [])
