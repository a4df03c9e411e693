"""The time criteria's operands: ``date``, ``day_of_week``, ``time_of_day``.

Windows are half-open: ``after`` is the first instant inside, ``before`` the first one
outside. A ``time_of_day`` whose ``after`` is later than its ``before`` runs across
midnight (``after: "22:00", before: "06:00"``). Time zones are IANA names (``zoneinfo``,
default UTC). YAML 1.1 reads an unquoted ``22:00`` as the base-60 number 1320: such a
number is refused with the advice to quote it, never guessed at.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Mapping
from typing import Any

from gateway.policy.nodes import DateRange, TimeWindow, Weekdays
from gateway.policy.operands import show
from gateway.policy.problems import Problems, did_you_mean

UTC = "UTC"
DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAYS = {name: i for i, name in enumerate(DAY_NAMES)} | {
    name[:3]: i for i, name in enumerate(DAY_NAMES)}
# PPL's layouts (Go's): "3:04 PM", "3:04PM", "3 PM", "3PM"; "15:04:05.999999999",
# "15:04:05", "15:04".
_CLOCK12 = re.compile(r"(\d{1,2})(?::(\d{2}))? ?([AaPp][Mm])")
_CLOCK24 = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?")
_TIME_FORMATS = '"3:04 PM", "3:04PM", "3 PM", "3PM", "15:04:05.999999999", "15:04:05", "15:04"'
_TIME_KEYS = ("after", "before", "timezone")
_DATE_KEYS = ("after", "before")
_WEEKDAY_KEYS = ("days", "timezone")


def parse_timezone(value: Any, where: str, problems: Problems) -> str | None:
    """An IANA time zone name that this system's time zone data knows."""
    if not isinstance(value, str) or not value:
        problems.error(where, f"expected an IANA time zone name such as Europe/Berlin, got "
                              f"{show(value)}")
        return None
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        problems.error(where, f"unknown time zone {show(value)}: use an IANA name such as "
                              "Europe/Berlin, America/New_York or UTC")
        return None
    return value


def parse_date(value: Any, where: str, problems: Problems) -> DateRange | None:
    """``{after: INSTANT, before: INSTANT}`` (at least one): RFC 3339 / ISO 8601 instants,
    UTC when they name no offset."""
    if not isinstance(value, Mapping) or not value:
        problems.error(where, f"expected {{after: DATE, before: DATE}} (at least one), got "
                              f"{show(value)}")
        return None
    bounds: dict[str, float] = {}
    ok = _known_keys(value, _DATE_KEYS, where, problems)
    for key in _DATE_KEYS:
        if key in value:
            instant = _instant(value[key], f"{where}.{key}", problems)
            if instant is None:
                ok = False
            else:
                bounds[key] = instant
    if not ok:
        return None
    after, before = bounds.get("after"), bounds.get("before")
    if after is not None and before is not None and after >= before:
        problems.error(where, "after must be earlier than before: no instant is in this range")
        return None
    return DateRange(after, before)


def _instant(value: Any, where: str, problems: Problems) -> float | None:
    moment: dt.datetime | None = None
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            moment = None
    if moment is None:
        problems.error(where, f"not an RFC 3339 date: {show(value)} (write it as "
                              "2026-01-31T18:00:00Z or 2026-01-31)")
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def parse_time_of_day(value: Any, where: str, problems: Problems) -> TimeWindow | None:
    """``{after: TIME, before: TIME, timezone: ZONE}``: at least one of the times."""
    if not isinstance(value, Mapping) or not value:
        problems.error(where, f"expected {{after: TIME, before: TIME, timezone: ZONE}}, got "
                              f"{show(value)}")
        return None
    ok = _known_keys(value, _TIME_KEYS, where, problems)
    if "after" not in value and "before" not in value:
        problems.error(where, "give after, before or both")
        ok = False
    times: dict[str, float] = {}
    for key in ("after", "before"):
        if key in value:
            seconds = parse_clock(value[key], f"{where}.{key}", problems)
            if seconds is None:
                ok = False
            else:
                times[key] = seconds
    zone: str | None = UTC
    if "timezone" in value:
        zone = parse_timezone(value["timezone"], f"{where}.timezone", problems)
    if not ok or zone is None:
        return None
    after, before = times.get("after"), times.get("before")
    if after is not None and after == before:
        problems.error(where, "after and before are the same time: the window is empty")
        return None
    if after is None and before == 0:
        problems.error(where, "before midnight, with no after: the window is empty")
        return None
    return TimeWindow(after, before, zone)


def parse_clock(value: Any, where: str, problems: Problems) -> float | None:
    """A time of day in one of PPL's layouts, as seconds since midnight."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        problems.error(where, f"{show(value)} is a number: YAML reads an unquoted time "
                              "such as 22:00 as one (in base 60); quote it: \"22:00\"")
        return None
    text = value.strip() if isinstance(value, str) else None
    seconds = _clock(text) if text is not None else None
    if seconds is None:
        problems.error(where, f"not a time of day: {show(value)}; use one of {_TIME_FORMATS}")
    return seconds


def _clock(text: str) -> float | None:
    match = _CLOCK12.fullmatch(text)
    if match is not None:
        hour, minute = int(match[1]), int(match[2] or 0)
        if not 1 <= hour <= 12 or minute > 59:
            return None
        hour = hour % 12 + (12 if match[3].lower() == "pm" else 0)
        return float(hour * 3600 + minute * 60)
    match = _CLOCK24.fullmatch(text)
    if match is None:
        return None
    hour, minute, second = int(match[1]), int(match[2]), int(match[3] or 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    fraction = float(f"0.{match[4]}") if match[4] else 0.0
    return hour * 3600 + minute * 60 + second + fraction


def parse_weekdays(value: Any, where: str, problems: Problems) -> Weekdays | None:
    """``"*"``, ``"mon,wed,fri"``, ``"tue-fri"`` (ranges may wrap: ``fri-mon``), full
    English names or their first three letters, any case; a YAML list of those; or (our
    extension) ``{days: ..., timezone: ZONE}`` for a zone other than UTC."""
    zone: str | None = UTC
    days_where = where
    if isinstance(value, Mapping):
        ok = _known_keys(value, _WEEKDAY_KEYS, where, problems)
        if "timezone" in value:
            zone = parse_timezone(value["timezone"], f"{where}.timezone", problems)
        if "days" not in value:
            problems.error(where, "give days: (such as mon-fri)")
            return None
        days_where, value = f"{where}.days", value["days"]
        if not ok:
            zone = None
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str) or not value.strip():
        problems.error(days_where, f"expected days such as \"mon-fri\" or \"sat,sun\", got "
                                   f"{show(value)}")
        return None
    days = _days(value)
    if days is None:
        problems.error(days_where, f"not a day-of-week list: {show(value)}; use *, names or "
                                   "their first three letters, commas and ranges (mon-fri)")
        return None
    if zone is None:
        return None
    return Weekdays(frozenset(days), zone)


def _days(text: str) -> set[int] | None:
    days: set[int] = set()
    for item in text.split(","):
        item = item.strip().lower()
        if item == "*":
            days.update(range(7))
            continue
        first, dash, last = (part.strip() for part in item.partition("-"))
        if first not in _DAYS or (dash and last not in _DAYS):
            return None
        start, end = _DAYS[first], _DAYS[last] if dash else _DAYS[first]
        days.update((start + i) % 7 for i in range((end - start) % 7 + 1))
    return days


def _known_keys(value: Mapping[Any, Any], known: tuple[str, ...], where: str,
                problems: Problems) -> bool:
    ok = True
    for key in value:
        if key not in known:
            problems.error(f"{where}.{key}", "unknown key; use " + ", ".join(known)
                           + did_you_mean(key, known))
            ok = False
    return ok


def clock_text(seconds: float) -> str:
    """Seconds since midnight as ``HH:MM`` (``HH:MM:SS`` when it has seconds)."""
    whole = int(seconds)
    hour, minute, second = whole // 3600, whole // 60 % 60, whole % 60
    text = f"{hour:02d}:{minute:02d}"
    if second or seconds != whole:
        text += f":{second:02d}"
    return text


def days_text(days: frozenset[int]) -> str:
    """``mon-fri``, ``sat,sun``, ``*``."""
    if len(days) == 7:
        return "*"
    names = [DAY_NAMES[d][:3] for d in sorted(days)]
    order = sorted(days)
    if len(order) > 2 and order == list(range(order[0], order[-1] + 1)):
        return f"{names[0]}-{names[-1]}"
    return ",".join(names)


def instant_text(epoch: float) -> str:
    """An instant as RFC 3339 in UTC."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat().replace(
        "+00:00", "Z")
