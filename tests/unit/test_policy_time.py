"""``date``, ``day_of_week`` and ``time_of_day`` at frozen instants: boundaries, the
window across midnight, time zones and their daylight-saving changes, PPL's time
layouts."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import yaml
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.errors import Problems
from gateway.policy import Facts, Policy, parse_document


def at(text: str, zone: str = "UTC") -> float:
    """Epoch seconds of the local time ``text`` (ISO) in ``zone``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=zoneinfo.ZoneInfo(zone)).timestamp()


def allows(criterion: str, now: float) -> bool:
    problems = Problems()
    document = parse_document(yaml.safe_load(f"allow: {{and: [{criterion}]}}"), "policy",
                              problems)
    assert document is not None, [str(p) for p in problems.errors]
    return Policy(document).evaluate(Facts(now=now)).allowed


class DateTests(SynchronousTestCase):
    def test_half_open_range(self) -> None:
        rule = "{date: {after: '2026-03-01T09:00:00Z', before: '2026-03-02T09:00:00Z'}}"
        self.assertFalse(allows(rule, at("2026-03-01T08:59:59")))
        self.assertTrue(allows(rule, at("2026-03-01T09:00:00")))
        self.assertTrue(allows(rule, at("2026-03-02T08:59:59.999")))
        self.assertFalse(allows(rule, at("2026-03-02T09:00:00")))

    def test_one_bound(self) -> None:
        self.assertTrue(allows("{date: {after: '2026-01-01'}}", at("2030-01-01T00:00:00")))
        self.assertFalse(allows("{date: {after: '2026-01-01'}}", at("2025-12-31T23:59:59")))
        self.assertTrue(allows("{date: {before: '2026-01-01'}}", at("2025-12-31T23:59:59")))

    def test_offsets(self) -> None:
        """An offset is honoured; a time without one is UTC (PPL's own example has none)."""
        rule = "{date: {after: '2026-03-01T09:00:00+02:00'}}"
        self.assertFalse(allows(rule, at("2026-03-01T06:59:59")))
        self.assertTrue(allows(rule, at("2026-03-01T07:00:00")))
        naive = "{date: {after: '2026-03-01T09:00:00'}}"
        self.assertFalse(allows(naive, at("2026-03-01T08:59:59")))
        self.assertTrue(allows(naive, at("2026-03-01T09:00:00")))

    def test_unquoted_yaml_dates(self) -> None:
        """YAML turns unquoted dates into date and datetime values; both are read."""
        self.assertTrue(allows("{date: {after: 2026-03-01T09:00:00Z, before: 2026-03-02}}",
                               at("2026-03-01T10:00:00")))
        self.assertFalse(allows("{date: {after: 2026-03-01T09:00:00+01:00}}",
                                at("2026-03-01T07:59:00")))
        self.assertTrue(allows("{date: {after: 2026-03-01T09:00:00+01:00}}",
                               at("2026-03-01T08:00:00")))


class WeekdayTests(SynchronousTestCase):
    THURSDAY = at("2026-01-01T12:00:00")  # 2026-01-01 is a Thursday

    def days(self, spec: str) -> list[str]:
        """The days of the week (from Monday 2026-01-05) that ``spec`` allows."""
        names = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
        return [names[i] for i in range(7)
                if allows(f"{{day_of_week: {spec}}}", at(f"2026-01-{5 + i:02d}T12:00:00"))]

    def test_forms(self) -> None:
        self.assertEqual(self.days("'*'"), ["mon", "tue", "wed", "thu", "fri", "sat", "sun"])
        self.assertEqual(self.days("mon-fri"),
                         ["mon", "tue", "wed", "thu", "fri"])
        self.assertEqual(self.days("'mon,wed,fri'"), ["mon", "wed", "fri"])
        self.assertEqual(self.days("tue-fri"), ["tue", "wed", "thu", "fri"])
        self.assertEqual(self.days("Saturday"), ["sat"])
        self.assertEqual(self.days("'SUNDAY, mon'"), ["mon", "sun"])
        self.assertEqual(self.days("[sat, sun]"), ["sat", "sun"])
        self.assertEqual(self.days("'mon-tue, fri'"), ["mon", "tue", "fri"])

    def test_ranges_wrap(self) -> None:
        self.assertEqual(self.days("fri-mon"), ["mon", "fri", "sat", "sun"])
        self.assertEqual(self.days("sun-sun"), ["sun"])

    def test_utc_by_default(self) -> None:
        """Monday 00:30 in Berlin is still Sunday in UTC."""
        monday_berlin = at("2026-01-05T00:30:00", "Europe/Berlin")
        self.assertFalse(allows("{day_of_week: mon}", monday_berlin))
        self.assertTrue(allows("{day_of_week: {days: mon, timezone: Europe/Berlin}}",
                               monday_berlin))
        self.assertFalse(allows("{day_of_week: {days: sun, timezone: Europe/Berlin}}",
                                monday_berlin))

    def test_epoch_weekday(self) -> None:
        self.assertTrue(allows("{day_of_week: thu}", 0.0))  # 1970-01-01 was a Thursday
        self.assertTrue(allows("{day_of_week: wed}", -1.0))


class TimeOfDayTests(SynchronousTestCase):
    def test_window(self) -> None:
        rule = "{time_of_day: {after: '9:00', before: '17:00'}}"
        self.assertFalse(allows(rule, at("2026-01-01T08:59:59")))
        self.assertTrue(allows(rule, at("2026-01-01T09:00:00")))
        self.assertTrue(allows(rule, at("2026-01-01T16:59:59")))
        self.assertFalse(allows(rule, at("2026-01-01T17:00:00")))

    def test_across_midnight(self) -> None:
        rule = "{time_of_day: {after: '22:00', before: '06:00'}}"
        for clock, inside in (("21:59:59", False), ("22:00:00", True), ("23:59:59", True),
                              ("00:00:00", True), ("05:59:59", True), ("06:00:00", False),
                              ("12:00:00", False)):
            self.assertEqual(allows(rule, at(f"2026-01-01T{clock}")), inside, clock)

    def test_one_bound(self) -> None:
        self.assertTrue(allows("{time_of_day: {after: '20:00'}}", at("2026-01-01T23:59:59")))
        self.assertFalse(allows("{time_of_day: {after: '20:00'}}", at("2026-01-01T00:00:01")))
        self.assertTrue(allows("{time_of_day: {before: '6 AM'}}", at("2026-01-01T00:00:00")))
        self.assertFalse(allows("{time_of_day: {before: '6 AM'}}", at("2026-01-01T06:00:00")))

    def test_layouts(self) -> None:
        """PPL's: "3:04 PM", "3:04PM", "3 PM", "3PM", "15:04:05.999999999", "15:04:05",
        "15:04"."""
        noon_thirty = at("2026-01-01T12:30:00")
        for after in ("12:30 PM", "12:30PM", "12 pm", "12PM", "12:29:59.999999999",
                      "12:30:00", "12:30", "0:00"):
            self.assertTrue(allows(f"{{time_of_day: {{after: '{after}'}}}}", noon_thirty),
                            after)
        for after in ("12:30:00.001", "12:31", "1 PM", "1:00pm"):
            self.assertFalse(allows(f"{{time_of_day: {{after: '{after}'}}}}", noon_thirty),
                             after)
        self.assertTrue(allows("{time_of_day: {before: '12:30 AM'}}", at("2026-01-01T00:29:00")))
        self.assertFalse(allows("{time_of_day: {after: '1:00', before: '12:30 AM'}}",
                                at("2026-01-01T00:30:00")))
        self.assertTrue(allows("{time_of_day: {after: '12 AM'}}", at("2026-01-01T00:00:00")))

    def test_time_zones(self) -> None:
        rule = "{time_of_day: {after: '9:00', before: '17:00', timezone: Asia/Kolkata}}"
        self.assertTrue(allows(rule, at("2026-01-01T03:30:00")))  # 09:00 in Kolkata
        self.assertFalse(allows(rule, at("2026-01-01T03:29:59")))
        self.assertFalse(allows(rule, at("2026-01-01T11:30:00")))

    def test_daylight_saving(self) -> None:
        """9:00 in New York is 14:00 UTC in winter and 13:00 UTC in summer."""
        rule = "{time_of_day: {after: '9:00', before: '17:00', timezone: America/New_York}}"
        self.assertFalse(allows(rule, at("2026-01-15T13:30:00")))
        self.assertTrue(allows(rule, at("2026-07-15T13:30:00")))
        # the change itself (2026-03-08 07:00 UTC): one second on either side
        night = "{time_of_day: {after: '2:00', before: '4:00', timezone: America/New_York}}"
        self.assertFalse(allows(night, at("2026-03-08T06:59:59")))  # 01:59:59 EST
        self.assertTrue(allows(night, at("2026-03-08T07:00:00")))  # 03:00:00 EDT

    def test_same_minute_cached_offset_is_exact(self) -> None:
        """The zone's offset is looked up once a minute; both sides of a change agree."""
        rule = "{time_of_day: {before: '2:00', timezone: Europe/Berlin}}"
        change = at("2026-03-29T01:00:00")  # 02:00 CET becomes 03:00 CEST
        self.assertTrue(allows(rule, change - 0.5))
        self.assertFalse(allows(rule, change))
        self.assertTrue(allows(rule, change - 0.25))


class CombinedTests(SynchronousTestCase):
    def test_working_hours(self) -> None:
        """Weekdays 9 to 17 in Berlin: the usual combination."""
        rule = ("{day_of_week: {days: mon-fri, timezone: Europe/Berlin}}, {time_of_day: "
                "{after: '9:00', before: '17:00', timezone: Europe/Berlin}}")
        self.assertTrue(allows(rule, at("2026-01-05T10:00:00", "Europe/Berlin")))
        self.assertFalse(allows(rule, at("2026-01-10T10:00:00", "Europe/Berlin")))  # Sat
        self.assertFalse(allows(rule, at("2026-01-05T18:00:00", "Europe/Berlin")))
