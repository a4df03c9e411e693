"""The criteria compiled to a shorter function for speed decide exactly as the general
form does: a lone ``http_path`` prefix and ``email`` suffix (against the same matcher
joined with a ``not_in`` that excludes nothing, which takes the general string test), a
``time_of_day`` in UTC (against ``Etc/GMT``, the same zero offset looked up through the
zone clock), and ``source_ip`` on an address seen before and one never seen."""

from __future__ import annotations

from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from gateway.policy import Facts

from .test_policy_criteria import ANONYMOUS, SIGNED, compiled

DAY = 86400.0
MIDNIGHT = 1_799_971_200.0  # 2027-01-15 00:00 UTC


def decide(criterion: str, **changes: Any) -> bool:
    facts = dict(SIGNED)
    facts.update(changes)
    return compiled(f"allow: {{or: [{criterion}]}}").evaluate(Facts(**facts)).allowed


class AffixTests(SynchronousTestCase):
    def test_path_prefix(self) -> None:
        for path in ("/docs", "/docs/a", "/doc", "/", "", "/DOCS/a", "/x/docs"):
            self.assertEqual(decide("{http_path: {starts_with: /docs}}", path=path),
                             decide("{http_path: {starts_with: /docs, not_in: [zz]}}",
                                    path=path), path)

    def test_email_suffix(self) -> None:
        cases: list[dict[str, Any]] = [{"email": e} for e in (
            "ada@example.com", "ADA@EXAMPLE.COM", "ada@example.co", "", "example.com")]
        cases += [ANONYMOUS, {"authenticated": False}]  # an e-mail left in the facts
        for case in cases:
            self.assertEqual(decide("{email: {ends_with: '@example.com'}}", **case),
                             decide("{email: {ends_with: '@example.com', not_in: [zz]}}",
                                    **case), case)


class UtcTests(SynchronousTestCase):
    def test_time_of_day_in_utc_is_the_zone_clocks(self) -> None:
        windows = ('after: "09:00", before: "17:00"', 'after: "22:00", before: "06:00"',
                   'after: "12:00"', 'before: "08:30"')
        for window in windows:
            for minutes in range(0, 24 * 60, 15):
                now = MIDNIGHT + 3 * DAY + minutes * 60
                utc = decide(f"{{time_of_day: {{{window}, timezone: UTC}}}}", now=now)
                gmt = decide(f"{{time_of_day: {{{window}, timezone: Etc/GMT}}}}", now=now)
                self.assertEqual(utc, gmt, (window, minutes))

    def test_utc_is_the_default(self) -> None:
        now = MIDNIGHT + 10 * 3600
        self.assertTrue(decide('{time_of_day: {after: "09:00", before: "11:00"}}', now=now))
        self.assertFalse(decide('{time_of_day: {after: "11:00", before: "09:00"}}', now=now))


class SourceIpTests(SynchronousTestCase):
    def test_seen_and_unseen_addresses(self) -> None:
        criterion = '{source_ip: [192.0.2.0/24, "2001:db8::/32"]}'
        for _ in range(2):  # the second round reads the remembered parses
            for address, inside in (("192.0.2.77", True), ("198.51.100.1", False),
                                    ("::ffff:192.0.2.9", True), ("2001:db8::1", True),
                                    ("not an address", False), ("", False)):
                self.assertEqual(decide(criterion, client_ip=address), inside, address)
