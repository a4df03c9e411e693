"""Structured logging on ``twisted.logger``: flat JSON lines, or coloured text in debug mode.

Levels live in a mutable :class:`LevelControl` so a hot reload can change them in place.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import string
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, cast

from twisted.logger import (
    FilteringLogObserver,
    ILogFilterPredicate,
    ILogObserver,
    LogEvent,
    LogLevel,
    PredicateResult,
    formatEvent,
)
from twisted.python.failure import Failure
from twisted.python.log import textFromEventDict

# Untyped package; "unused-ignore" keeps this clean once mypy is told to ignore it.
from zope.interface import implementer  # type: ignore[import-untyped, unused-ignore]

ACCESS_NAMESPACE = "gateway.access"  # proxy access logs, filtered by their own level

REDACTED = "[redacted]"

_ALL_LEVELS = frozenset(LogLevel.iterconstants())
_SETTABLE_LEVELS: dict[str, LogLevel] = {"warning": LogLevel.warn}
_SETTABLE_LEVELS.update((n, LogLevel.levelWithName(n)) for n in ("debug", "info", "warn", "error"))
# ANSI SGR codes: grey, green, yellow, red, bold red.
_COLOURS = dict(zip(LogLevel.iterconstants(), ("90", "32", "33", "31", "1;31"), strict=True))
_TRUTHY = frozenset({"1", "t", "true", "yes"})
_SECRET_WORDS = frozenset(
    ("secret", "password", "passphrase", "token", "cookie", "authorization", "key")
)
# Splits "client_secret", "X-Api-Key", "idToken" and "ID_TOKEN" into words.
_WORD_RE = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
# Keys of legacy twisted.python.log events that are rendered into the fixed fields.
_LEGACY_KEYS = frozenset({"format", "message", "isError", "system", "time", "failure", "why"})
# One lock for every write so concurrent threads never interleave partial lines.
_WRITE_LOCK = threading.Lock()


def parse_level(name: str) -> LogLevel:
    """Map a configured level name (``warning`` is an alias of ``warn``) to a LogLevel."""
    level = _SETTABLE_LEVELS.get(name.strip().lower())
    if level is None:
        raise ValueError(f"unknown log level {name!r}; expected debug, info, warn or error")
    return level


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    """Whether a field name's last word (plural allowed) names a secret, e.g. ``id_token``.

    Cached: the same few field names come back on every event."""
    last = (_WORD_RE.findall(name) or [""])[-1].lower()
    return last in _SECRET_WORDS or (last.endswith("s") and last[:-1] in _SECRET_WORDS)


def debug_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``GATEWAY_DEBUG`` is truthy (Go's ``strconv.ParseBool`` true set, plus ``yes``)."""
    env = os.environ if environ is None else environ
    return env.get("GATEWAY_DEBUG", "").strip().lower() in _TRUTHY


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__qualname__}>"


def _json_safe(value: object, depth: int = 0) -> object:
    """Reduce a value to JSON types, redacting secret-named keys at any depth."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)  # NaN is not JSON
    if depth >= 8:  # bounds nesting, including self-referencing containers
        return _safe_repr(value)
    if isinstance(value, Mapping):
        return {
            str(k): REDACTED if is_secret_key(str(k)) else _json_safe(v, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_safe(v, depth + 1) for v in value]
    return _safe_repr(value)


def _level_of(event: LogEvent) -> LogLevel:
    level = event.get("log_level")
    if level in _ALL_LEVELS:
        return cast(LogLevel, level)
    # A raw twisted.python.log event, not yet adapted by publishToNewObserver.
    return cast(LogLevel, LogLevel.critical if event.get("isError") else LogLevel.info)


def _event_time(event: LogEvent) -> float:
    when = event.get("log_time", event.get("time"))
    if isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    return time.time()


@functools.lru_cache(maxsize=4)
def _second(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _rfc3339(when: float) -> str:
    millis = math.floor(when * 1000)
    return f"{_second(millis // 1000)}.{millis % 1000:03d}Z"


def _message(event: LogEvent, failure: Failure | None) -> str:
    if failure is not None and isinstance(event.get("failure"), Failure):
        # Legacy log.err(): its text embeds the traceback, which has its own field.
        return str(event.get("why") or "Unhandled Error")
    fmt = event.get("log_format")
    if isinstance(fmt, str):
        plan = _simple_format(fmt)
        if plan is not None:
            try:
                return "".join(
                    part if not is_field else
                    (REDACTED if is_secret_key(part) else str(event[part]))
                    for part, is_field in plan
                )
            except KeyError:
                pass  # a missing field: let Twisted render its own explanation
    # Redacted copy: a "{token}" format or Twisted's unformattable-event dump must not leak.
    safe = {k: REDACTED if is_secret_key(str(k)) else v for k, v in event.items()}
    text = formatEvent(safe)
    if not text and "log_format" not in event:
        # twisted.python.log.msg() event (e.g. twistd's start-up lines) without
        # the "{log_text}" format publishToNewObserver normally adds.
        text = textFromEventDict(safe) or ""
    return text


@functools.lru_cache(maxsize=1024)
def _simple_format(fmt: str) -> tuple[tuple[str, bool], ...] | None:
    """A format made only of ``{name}`` fields, parsed once: [(text, is_field)...].

    ``string.Formatter`` costs most of an event's rendering; access logs use plain
    names only. Anything fancier (specs, conversions, attribute or index lookups,
    calls) returns None and goes through ``formatEvent``."""
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return None
    plan: list[tuple[str, bool]] = []
    for literal, field, spec, conversion in parsed:
        if literal:
            plan.append((literal, False))
        if field is None:
            continue
        if spec or conversion or not field.isidentifier():
            return None
        plan.append((field, True))
    return tuple(plan)


def flatten_event(event: LogEvent) -> dict[str, object]:
    """Render an event as the flat, JSON-safe, redacted mapping that is logged."""
    # "failure" is where legacy log.err() puts it.
    failure = next(
        (f for k in ("log_failure", "failure") if isinstance(f := event.get(k), Failure)), None
    )
    namespace = event.get("log_namespace") or ("log_legacy" if "isError" in event else "-")
    flat: dict[str, object] = {
        "time": _rfc3339(_event_time(event)),
        "level": str(_level_of(event).name),
        "namespace": str(namespace),
        "message": _message(event, failure),
    }
    system = event.get("log_system", event.get("system"))
    if isinstance(system, str) and system not in ("", "-"):
        flat["system"] = system
    for key, value in ((str(k), v) for k, v in event.items()):
        if key.startswith("log_") or key in _LEGACY_KEYS:
            continue
        # A field must not overwrite a fixed one, e.g. log.info("...", level=3).
        name = f"event_{key}" if key in flat or key == "traceback" else key
        flat[name] = REDACTED if is_secret_key(key) else _json_safe(value)
    if failure is not None:
        type_name = getattr(failure.type, "__qualname__", None) or _safe_repr(failure.type)
        flat["failure"] = f"{type_name}: {failure.getErrorMessage()}"
        flat["traceback"] = failure.getTraceback()
    return flat


def _write(stream: IO[str], text: str) -> None:
    try:
        with _WRITE_LOCK:
            stream.write(text)
            stream.flush()
    except Exception:
        pass  # a broken log stream has nowhere left to report to


@implementer(ILogObserver)
class FlatJSONObserver:
    """Writes each event as one flat JSON object on its own line, flushed at once."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def __call__(self, event: LogEvent) -> None:
        try:
            line = json.dumps(flatten_event(event), allow_nan=False)
        except Exception as error:
            now, problem = _rfc3339(time.time()), json.dumps(_safe_repr(error))
            line = f'{{"time": "{now}", "level": "error", "namespace": "{__name__}", '
            line += f'"message": "unserialisable log event", "error": {problem}}}'
        _write(self._stream, line + "\n")


def _text_value(value: object) -> str:
    if isinstance(value, str) and value and not re.search(r'[\s="]', value):
        return value
    return json.dumps(value, separators=(",", ":"))


@implementer(ILogObserver)
class ColoredTextObserver:
    """Writes ``HH:MM:SS.mmm LEVEL namespace: message key=value ...`` in local time."""

    def __init__(self, stream: IO[str], color: bool = True) -> None:
        self._stream = stream
        self._color = color

    def __call__(self, event: LogEvent) -> None:
        try:
            text = self._format(event)
        except Exception as error:
            text = f"ERROR {__name__}: unformattable log event: {_safe_repr(error)}\n"
        _write(self._stream, text)

    def _format(self, event: LogEvent) -> str:
        millis = math.floor(_event_time(event) * 1000)
        stamp = (
            datetime.fromtimestamp(millis // 1000).strftime("%H:%M:%S") + f".{millis % 1000:03d}"
        )
        level = _level_of(event)
        label = f"{str(level.name).upper():<5}"
        if self._color:
            label = f"\x1b[{_COLOURS[level]}m{label}\x1b[0m"
        flat = flatten_event(event)
        traceback = flat.pop("traceback", None)
        parts = [stamp, label, f"{flat.pop('namespace')}:", str(flat.pop("message"))]
        del flat["time"], flat["level"]
        parts.extend(f"{key}={_text_value(value)}" for key, value in flat.items())
        line = " ".join(part for part in parts if part)
        if isinstance(traceback, str):
            line += "\n" + traceback.rstrip("\n")
        return line + "\n"


@implementer(ILogFilterPredicate)
class LevelControl:
    """Minimum levels, mutable at runtime: one for ``gateway.access``, one for the rest."""

    def __init__(self, log_level: str = "info", proxy_log_level: str = "info") -> None:
        self.log_level: LogLevel = parse_level(log_level)
        self.proxy_log_level: LogLevel = parse_level(proxy_log_level)
        # read once per request (comparing LogLevel constants is a Python-level call)
        self.access_logged = bool(LogLevel.info >= self.proxy_log_level)
        # whether an info event outside gateway.access is shown (the audit stream's)
        self.info_logged = bool(LogLevel.info >= self.log_level)

    def set_levels(self, log_level: str, proxy_log_level: str) -> None:
        """Set both levels; neither changes if either name is invalid."""
        main, proxy = parse_level(log_level), parse_level(proxy_log_level)
        self.log_level, self.proxy_log_level = main, proxy
        self.access_logged = bool(LogLevel.info >= proxy)
        self.info_logged = bool(LogLevel.info >= main)

    def __call__(self, event: LogEvent) -> PredicateResult:
        namespace = str(event.get("log_namespace") or "")
        access = namespace == ACCESS_NAMESPACE or namespace.startswith(ACCESS_NAMESPACE + ".")
        minimum = self.proxy_log_level if access else self.log_level
        result = PredicateResult.maybe if _level_of(event) >= minimum else PredicateResult.no
        return cast(PredicateResult, result)  # "maybe", not "yes": later predicates may veto


def _filtered(inner: object, levels: LevelControl) -> ILogObserver:
    # Casts: without the mypy-zope plugin mypy cannot see @implementer.
    predicate = cast(ILogFilterPredicate, levels)
    return cast(ILogObserver, FilteringLogObserver(cast(ILogObserver, inner), [predicate]))


def make_observer(stream: IO[str], *, debug: bool, levels: LevelControl) -> ILogObserver:
    """JSON (or, when ``debug``, text coloured only on a TTY) filtered by ``levels``."""
    if debug:
        return _filtered(ColoredTextObserver(stream, color=stream.isatty()), levels)
    return _filtered(FlatJSONObserver(stream), levels)


LEVELS = LevelControl()
# Output mode of observer() observers, read per event; None until configure() is called.
_debug_mode: bool | None = None


@implementer(ILogObserver)
class _SwitchingObserver:
    """Chooses JSON or text per event, since the config is loaded after twistd starts logging."""

    def __init__(self, stream: IO[str], default_debug: bool) -> None:
        self._json = FlatJSONObserver(stream)
        self._text = ColoredTextObserver(stream, color=stream.isatty())
        self._default_debug = default_debug

    def __call__(self, event: LogEvent) -> None:
        debug = self._default_debug if _debug_mode is None else _debug_mode
        (self._text if debug else self._json)(event)


def observer() -> ILogObserver:
    """Factory for ``twistd --logger=gateway.observability.logging.observer``.

    Captures ``sys.stdout`` now: twistd then redirects it into the log system.
    """
    return _filtered(_SwitchingObserver(sys.stdout, debug_from_env()), LEVELS)


def configure(debug: bool, log_level: str, proxy_log_level: str) -> None:
    """Apply loaded config to :data:`LEVELS` and :func:`observer`'s output mode.

    ``debug`` replaces the GATEWAY_DEBUG default; pass ``debug or debug_from_env()`` to keep it.
    """
    global _debug_mode
    LEVELS.set_levels(log_level, proxy_log_level)  # raises before the mode changes
    _debug_mode = debug
