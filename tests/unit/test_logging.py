"""Unit tests for gateway.observability.logging."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from datetime import datetime
from typing import Any

from twisted.logger import (
    ILogObserver,
    LegacyLogObserverWrapper,
    Logger,
    LogLevel,
    LogPublisher,
    PredicateResult,
)
from twisted.python import log as legacy_log
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.observability import logging as gwlog

FIXED_TIME = 1700000000.1234  # 2023-11-14T22:13:20.123Z
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


class TTYStringIO(io.StringIO):
    """A StringIO that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


class FlushCountingStringIO(io.StringIO):
    """A StringIO that counts flush() calls and the text written before each."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed_at: list[str] = []

    def flush(self) -> None:
        self.flushed_at.append(self.getvalue())
        super().flush()


class BrokenStream(io.StringIO):
    """A stream whose writes always fail."""

    def write(self, s: str) -> int:
        raise OSError("disk on fire")


class BadRepr:
    """An object whose repr() raises."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    """Parse every line of stream as a JSON object."""
    text = stream.getvalue()
    assert text.endswith("\n"), text
    return [json.loads(line) for line in text.splitlines()]


def json_logger(
    levels: gwlog.LevelControl | None = None, namespace: str = "gateway.test"
) -> tuple[Logger, io.StringIO]:
    """A Logger writing JSON through make_observer into a StringIO."""
    stream = io.StringIO()
    control = levels if levels is not None else gwlog.LevelControl("debug", "debug")
    observer = gwlog.make_observer(stream, debug=False, levels=control)
    return Logger(namespace=namespace, observer=observer), stream


def legacy_publisher(observer: ILogObserver) -> legacy_log.LogPublisher:
    """A twisted.python.log publisher wired to observer, as twistd's global one is."""
    publisher = LogPublisher(observer)
    return legacy_log.LogPublisher(observerPublisher=publisher, publishPublisher=publisher)


def zero_division() -> Failure:
    """A Failure wrapping a real ZeroDivisionError with a traceback."""
    try:
        1 / 0  # noqa: B018
    except ZeroDivisionError:
        return Failure()
    raise AssertionError("unreachable")


class FlatJSONObserverTests(SynchronousTestCase):
    def test_one_line_per_event(self) -> None:
        """Each event becomes exactly one newline-terminated JSON line, even with newlines."""
        log, stream = json_logger()
        log.info("first")
        log.info("second\nhas a newline", extra="a\nb")
        log.warn("third")
        lines = json_lines(stream)
        self.assertEqual(
            [line["message"] for line in lines], ["first", "second\nhas a newline", "third"]
        )
        self.assertEqual(stream.getvalue().count("\n"), 3)

    def test_fixed_fields(self) -> None:
        """time (RFC 3339 UTC, ms, Z), level, namespace and message come first."""
        stream = io.StringIO()
        gwlog.FlatJSONObserver(stream)(
            {
                "log_time": FIXED_TIME,
                "log_level": LogLevel.warn,
                "log_namespace": "gateway.x",
                "log_format": "hi",
            }
        )
        (line,) = json_lines(stream)
        self.assertEqual(
            list(line.items()),
            [
                ("time", "2023-11-14T22:13:20.123Z"),
                ("level", "warn"),
                ("namespace", "gateway.x"),
                ("message", "hi"),
            ],
        )

    def test_level_names(self) -> None:
        """Every LogLevel maps to its lower-case name."""
        log, stream = json_logger()
        log.debug("d")
        log.info("i")
        log.warn("w")
        log.error("e")
        log.critical("c")
        lines = json_lines(stream)
        self.assertEqual(
            [line["level"] for line in lines], ["debug", "info", "warn", "error", "critical"]
        )
        for line in lines:
            self.assertRegex(line["time"], RFC3339_MS)

    def test_rendered_message_and_event_fields(self) -> None:
        """The message is rendered and the event's own keys are flat fields; log_* keys are not."""
        log, stream = json_logger(namespace="gateway.routes")
        log.info("route {route} took {ms}ms", route="app", ms=12, ok=True, ratio=0.5, none=None)
        (line,) = json_lines(stream)
        self.assertEqual(line["message"], "route app took 12ms")
        self.assertEqual(line["namespace"], "gateway.routes")
        self.assertEqual(
            {k: line[k] for k in ("route", "ms", "ok", "ratio", "none")},
            {"route": "app", "ms": 12, "ok": True, "ratio": 0.5, "none": None},
        )
        self.assertFalse([key for key in line if key.startswith("log_")])

    def test_legacy_msg_through_publisher(self) -> None:
        """twisted.python.log.msg text (twistd's start-up lines) appears as the message."""
        stream = io.StringIO()
        publisher = legacy_publisher(
            gwlog.make_observer(stream, debug=False, levels=gwlog.LevelControl())
        )
        publisher.msg("twistd 26.10.0 (/usr/bin/python3 3.11.2) starting up.")
        (line,) = json_lines(stream)
        self.assertEqual(line["message"], "twistd 26.10.0 (/usr/bin/python3 3.11.2) starting up.")
        self.assertEqual(line["level"], "info")
        self.assertEqual(line["namespace"], "log_legacy")
        # No legacy leftovers (isError, format, system "-", log_text) beside the fixed fields.
        self.assertEqual(sorted(line), ["level", "message", "namespace", "time"])

    def test_raw_legacy_event_dict(self) -> None:
        """A raw twisted.python.log event dict (no log_format) still renders its text."""
        stream = io.StringIO()
        gwlog.FlatJSONObserver(stream)(
            {"message": ("twistd", "starting up."), "isError": 0, "system": "-", "time": 1.5}
        )
        (line,) = json_lines(stream)
        self.assertEqual(line["message"], "twistd starting up.")
        self.assertEqual(line["time"], "1970-01-01T00:00:01.500Z")
        self.assertEqual(line["level"], "info")
        self.assertNotIn("system", line)

    def test_legacy_wrapper_event(self) -> None:
        """An event converted by LegacyLogObserverWrapper (with log_legacy) keeps its text."""
        converted: list[dict[str, Any]] = []
        LegacyLogObserverWrapper(converted.append)(
            {"log_format": "twistd starting up.", "log_level": LogLevel.info, "log_time": 2.0}
        )
        self.assertIn("log_legacy", converted[0])
        stream = io.StringIO()
        gwlog.FlatJSONObserver(stream)(converted[0])
        (line,) = json_lines(stream)
        self.assertEqual(line["message"], "twistd starting up.")
        self.assertNotIn("isError", line)

    def test_meaningful_system_kept(self) -> None:
        """A legacy system other than "-" is kept as the system field."""
        stream = io.StringIO()
        publisher = legacy_publisher(
            gwlog.make_observer(stream, debug=False, levels=gwlog.LevelControl())
        )
        publisher.msg("connection made", system="HTTPChannel,0,127.0.0.1")
        (line,) = json_lines(stream)
        self.assertEqual(line["system"], "HTTPChannel,0,127.0.0.1")

    def test_failure_has_type_message_and_traceback(self) -> None:
        """log.failure adds failure (type: message) and traceback fields."""
        log, stream = json_logger()
        try:
            1 / 0  # noqa: B018
        except ZeroDivisionError:
            log.failure("request {n} failed", n=3)
        (line,) = json_lines(stream)
        self.assertEqual(line["message"], "request 3 failed")
        self.assertEqual(line["level"], "critical")
        self.assertEqual(line["failure"], "ZeroDivisionError: division by zero")
        self.assertIn("Traceback", line["traceback"])
        self.assertIn("ZeroDivisionError", line["traceback"])
        self.assertIn("test_failure_has_type_message_and_traceback", line["traceback"])

    def test_legacy_err_failure(self) -> None:
        """A legacy log.err-style event uses "why" as message and reports the failure."""
        stream = io.StringIO()
        publisher = legacy_publisher(
            gwlog.make_observer(stream, debug=False, levels=gwlog.LevelControl())
        )
        publisher.msg(failure=zero_division(), why="Unhandled error in Deferred", isError=1)
        (line,) = json_lines(stream)
        self.assertEqual(line["message"], "Unhandled error in Deferred")
        self.assertEqual(line["level"], "critical")
        self.assertEqual(line["failure"], "ZeroDivisionError: division by zero")
        self.assertIn("Traceback", line["traceback"])

    def test_secret_named_keys_redacted(self) -> None:
        """Secret-looking keys are redacted at any depth; ordinary keys are not."""
        log, stream = json_logger()
        secrets = {
            "secret": "s1",
            "client_secret": "s2",
            "shared_secret": "s3",
            "id_token": "s4",
            "password": "s5",
            "cookie": "s6",
            "Authorization": "s7",
            "api_key": "s8",
            "sessionToken": "s9",
            "CLIENT_SECRET": "s10",
            "key": "s11",
        }
        plain = {"route": "app", "key_id": "kid-1", "token_endpoint": "https://idp", "monkey": "m"}
        log.info("x", headers={"Authorization": "Bearer s12", "Accept": "*/*"}, **secrets, **plain)
        raw = stream.getvalue()
        (line,) = json_lines(stream)
        for name in secrets:
            self.assertEqual(line[name], "[redacted]", name)
        for name, value in plain.items():
            self.assertEqual(line[name], value, name)
        self.assertEqual(line["headers"], {"Authorization": "[redacted]", "Accept": "*/*"})
        for leaked in [*secrets.values(), "s12"]:
            self.assertNotIn(f'"{leaked}"', raw)
        self.assertNotIn("Bearer", raw)

    def test_secret_not_leaked_through_message(self) -> None:
        """A secret interpolated into the format, or a format error dump, is redacted too."""
        log, stream = json_logger()
        log.info("login with {password}", password="hunter2")
        log.info("broken {format", token="hunter3")
        raw = stream.getvalue()
        lines = json_lines(stream)
        self.assertEqual(lines[0]["message"], "login with [redacted]")
        self.assertNotIn("hunter2", raw)
        self.assertNotIn("hunter3", raw)
        self.assertIn("Unable to format event", lines[1]["message"])

    def test_is_secret_key(self) -> None:
        """is_secret_key matches whole words or last-word suffixes, case-insensitively."""
        for name in ("token", "Cookie", "X-Api-Key", "client_secret", "idToken", "ID_TOKEN",
                     "passwords"):  # fmt: skip
            self.assertTrue(gwlog.is_secret_key(name), name)
        for name in ("route", "monkey", "key_id", "token_endpoint", "keystone", "", "__"):
            self.assertFalse(gwlog.is_secret_key(name), name)

    def test_non_serialisable_values(self) -> None:
        """Values that JSON cannot hold become strings, containers become lists/dicts."""
        log, stream = json_logger()
        recursive: list[object] = []
        recursive.append(recursive)
        log.info(
            "odd values",
            obj=object(),
            tup=(1, "a"),
            st=frozenset({"only"}),
            raw=b"\x00\xff",
            nan=float("nan"),
            bad=BadRepr(),
            nested={1: {"when": datetime(2024, 1, 2)}},
            recursive=recursive,
            level_obj=LogLevel.info,
        )
        (line,) = json_lines(stream)
        self.assertEqual(line["message"], "odd values")
        self.assertTrue(line["obj"].startswith("<object object at"))
        self.assertEqual(line["tup"], [1, "a"])
        self.assertEqual(line["st"], ["only"])
        self.assertEqual(line["raw"], "b'\\x00\\xff'")
        self.assertEqual(line["nan"], "nan")
        self.assertEqual(line["bad"], "<unrepresentable BadRepr>")
        self.assertEqual(line["nested"], {"1": {"when": "datetime.datetime(2024, 1, 2, 0, 0)"}})
        self.assertIsInstance(line["recursive"], list)
        self.assertEqual(line["level_obj"], "<LogLevel=info>")

    def test_reserved_names_not_overwritten(self) -> None:
        """Event keys clashing with fixed fields are renamed with an event_ prefix."""
        log, stream = json_logger(namespace="gateway.real")
        log.info("clash", namespace="fake", traceback="fake tb")
        (line,) = json_lines(stream)
        self.assertEqual(line["namespace"], "gateway.real")
        self.assertEqual(line["event_namespace"], "fake")
        self.assertEqual(line["event_traceback"], "fake tb")
        self.assertNotIn("traceback", line)

    def test_broken_event_falls_back_to_minimal_line(self) -> None:
        """An event that cannot be rendered yields a minimal error line instead of raising."""
        stream = io.StringIO()
        gwlog.FlatJSONObserver(stream)(
            {"log_time": 1e20, "log_level": LogLevel.info, "log_namespace": "x", "log_format": "m"}
        )
        (line,) = json_lines(stream)
        self.assertEqual(line["level"], "error")
        self.assertEqual(line["message"], "unserialisable log event")
        self.assertRegex(line["time"], RFC3339_MS)
        self.assertIn("error", line)

    def test_broken_stream_does_not_raise(self) -> None:
        """A stream that fails to write does not make the observers raise."""
        event = {"log_level": LogLevel.info, "log_namespace": "x", "log_format": "m"}
        gwlog.FlatJSONObserver(BrokenStream())(dict(event))
        gwlog.ColoredTextObserver(BrokenStream())(dict(event))
        # Reaching this line is the assertion; also check a good stream still works after.
        stream = io.StringIO()
        gwlog.FlatJSONObserver(stream)(dict(event))
        self.assertEqual(json_lines(stream)[0]["message"], "m")

    def test_flushed_after_each_event(self) -> None:
        """The stream is flushed after every event, once the full line is written."""
        stream = FlushCountingStringIO()
        log = Logger(namespace="t", observer=gwlog.FlatJSONObserver(stream))
        log.info("one")
        log.info("two")
        self.assertEqual(len(stream.flushed_at), 2)
        self.assertEqual(stream.flushed_at[0].count("\n"), 1)
        self.assertTrue(stream.flushed_at[1].endswith("\n"))


class ColoredTextObserverTests(SynchronousTestCase):
    def emit(self, color: bool, **event: Any) -> str:
        """Send one warn event at FIXED_TIME through a ColoredTextObserver."""
        stream = io.StringIO()
        base = {"log_time": FIXED_TIME, "log_level": LogLevel.warn, "log_namespace": "gateway.t"}
        gwlog.ColoredTextObserver(stream, color=color)({**base, **event})
        return stream.getvalue()

    def test_plain_line_format(self) -> None:
        """Without colour the line is "HH:MM:SS.mmm LEVEL namespace: message key=value"."""
        text = self.emit(
            False, log_format="hello {who}", who="world", route="r1", note="a b", n=2, password="p"
        )
        clock = datetime.fromtimestamp(FIXED_TIME).strftime("%H:%M:%S")
        self.assertEqual(
            text,
            f'{clock}.123 WARN  gateway.t: hello world who=world route=r1 note="a b" n=2 '
            "password=[redacted]\n",
        )

    def test_coloured_level(self) -> None:
        """With colour the level is wrapped in its ANSI colour and reset."""
        text = self.emit(True, log_format="careful")
        self.assertIn("\x1b[33mWARN \x1b[0m gateway.t: careful", text)
        error = self.emit(True, log_format="bad", log_level=LogLevel.error)
        self.assertIn("\x1b[31mERROR\x1b[0m", error)
        self.assertNotIn("\x1b", self.emit(False, log_format="careful"))

    def test_failure_traceback_on_following_lines(self) -> None:
        """A failure's traceback follows the event line."""
        text = self.emit(False, log_format="boom", log_failure=zero_division())
        first, *rest = text.rstrip("\n").split("\n")
        self.assertRegex(
            first,
            r"^\d\d:\d\d:\d\d\.\d{3} WARN  gateway\.t: boom "
            r'failure="ZeroDivisionError: division by zero"$',
        )
        self.assertEqual(rest[0], "Traceback (most recent call last):")
        self.assertIn("ZeroDivisionError", rest[-1])


class LevelControlTests(SynchronousTestCase):
    def test_parse_level(self) -> None:
        """Level names (and the warning alias) parse; anything else is a ValueError."""
        self.assertIs(gwlog.parse_level("debug"), LogLevel.debug)
        self.assertIs(gwlog.parse_level("info"), LogLevel.info)
        self.assertIs(gwlog.parse_level("warn"), LogLevel.warn)
        self.assertIs(gwlog.parse_level("warning"), LogLevel.warn)
        self.assertIs(gwlog.parse_level("error"), LogLevel.error)
        for bad in ("trace", "critical", "", "verbose"):
            self.assertRaises(ValueError, gwlog.parse_level, bad)
        self.assertRaises(ValueError, gwlog.LevelControl, "loud")

    def test_predicate_results(self) -> None:
        """The predicate says "no" below the minimum and "maybe" at or above it."""
        control = gwlog.LevelControl("warn", "info")
        below = {"log_level": LogLevel.info, "log_namespace": "gateway.x"}
        at = {"log_level": LogLevel.warn, "log_namespace": "gateway.x"}
        self.assertIs(control(below), PredicateResult.no)
        self.assertIs(control(at), PredicateResult.maybe)

    def test_default_level_filters_debug(self) -> None:
        """The default minimum is info: debug is dropped, info passes."""
        log, stream = json_logger(gwlog.LevelControl())
        log.debug("hidden")
        log.info("shown")
        self.assertEqual([line["message"] for line in json_lines(stream)], ["shown"])

    def test_level_changes_at_runtime(self) -> None:
        """set_levels changes what an existing observer lets through."""
        control = gwlog.LevelControl("info", "info")
        log, stream = json_logger(control)
        log.debug("dropped 1")
        log.info("kept 1")
        control.set_levels("error", "info")
        log.warn("dropped 2")
        log.error("kept 2")
        control.set_levels("debug", "info")
        log.debug("kept 3")
        self.assertEqual(
            [line["message"] for line in json_lines(stream)], ["kept 1", "kept 2", "kept 3"]
        )
        self.assertIs(control.log_level, LogLevel.debug)

    def test_invalid_set_levels_changes_nothing(self) -> None:
        """If either name is invalid, set_levels raises and keeps both old levels."""
        control = gwlog.LevelControl("warn", "error")
        self.assertRaises(ValueError, control.set_levels, "debug", "chatty")
        self.assertIs(control.log_level, LogLevel.warn)
        self.assertIs(control.proxy_log_level, LogLevel.error)

    def test_access_namespace_has_own_level(self) -> None:
        """gateway.access (and its children) use proxy_log_level; others use log_level."""
        control = gwlog.LevelControl("debug", "warn")
        stream = io.StringIO()
        observer = gwlog.make_observer(stream, debug=False, levels=control)
        access = Logger(namespace="gateway.access", observer=observer)
        child = Logger(namespace="gateway.access.tcp", observer=observer)
        other = Logger(namespace="gateway.accessory", observer=observer)
        access.info("access info")
        access.warn("access warn")
        child.info("child info")
        other.debug("other debug")
        control.set_levels("error", "debug")
        access.debug("access debug")
        other.warn("other warn")
        self.assertEqual(
            [line["message"] for line in json_lines(stream)],
            ["access warn", "other debug", "access debug"],
        )


class MakeObserverTests(SynchronousTestCase):
    def test_json_when_not_debug(self) -> None:
        """debug=False writes JSON lines."""
        stream = TTYStringIO()
        Logger(observer=gwlog.make_observer(stream, debug=False, levels=gwlog.LevelControl())).info(
            "json"
        )
        self.assertEqual(json_lines(stream)[0]["message"], "json")

    def test_text_when_debug_coloured_only_on_tty(self) -> None:
        """debug=True writes text, coloured only when the stream is a TTY."""
        levels = gwlog.LevelControl()
        tty, plain = TTYStringIO(), io.StringIO()
        Logger(namespace="n", observer=gwlog.make_observer(tty, debug=True, levels=levels)).info(
            "t"
        )
        Logger(namespace="n", observer=gwlog.make_observer(plain, debug=True, levels=levels)).info(
            "t"
        )
        self.assertIn("\x1b[32mINFO \x1b[0m n: t", tty.getvalue())
        self.assertRegex(plain.getvalue(), r"^\d\d:\d\d:\d\d\.\d{3} INFO  n: t\n$")

    def test_filtered_by_levels(self) -> None:
        """The returned observer applies the LevelControl in both modes."""
        levels = gwlog.LevelControl("error", "error")
        for debug in (False, True):
            stream = io.StringIO()
            log = Logger(observer=gwlog.make_observer(stream, debug=debug, levels=levels))
            log.warn("dropped")
            self.assertEqual(stream.getvalue(), "")


class ModuleObserverTests(SynchronousTestCase):
    def setUp(self) -> None:
        """Capture stdout and isolate LEVELS, the output mode and GATEWAY_DEBUG."""
        self.stdout = io.StringIO()
        self.patch(sys, "stdout", self.stdout)
        self.patch(gwlog, "LEVELS", gwlog.LevelControl())
        self.patch(gwlog, "_debug_mode", None)
        old = os.environ.pop("GATEWAY_DEBUG", None)
        if old is not None:
            self.addCleanup(os.environ.__setitem__, "GATEWAY_DEBUG", old)
        self.addCleanup(os.environ.pop, "GATEWAY_DEBUG", None)

    def log_once(self, message: str) -> str:
        """Log message through a fresh observer() and return what it wrote."""
        start = len(self.stdout.getvalue())
        Logger(namespace="gateway.t", observer=gwlog.observer()).info(message)
        return self.stdout.getvalue()[start:]

    def assertIsJSON(self, text: str, message: str) -> None:
        """Assert text is one JSON line carrying message."""
        self.assertEqual(json.loads(text)["message"], message)

    def assertIsText(self, text: str, message: str) -> None:
        """Assert text is one uncoloured text line carrying message."""
        self.assertRegex(text, rf"^\d\d:\d\d:\d\d\.\d{{3}} INFO  gateway\.t: {message}\n$")

    def test_json_to_stdout_by_default(self) -> None:
        """Without GATEWAY_DEBUG, observer() writes JSON to sys.stdout."""
        self.assertIsJSON(self.log_once("plain"), "plain")

    def test_truthy_gateway_debug_selects_text(self) -> None:
        """GATEWAY_DEBUG in 1/t/true/yes (any case) selects uncoloured text on a non-TTY."""
        for value in ("1", "t", "T", "true", "TRUE", "yes", "Yes"):
            os.environ["GATEWAY_DEBUG"] = value
            self.assertIsText(self.log_once(f"debug-{value}"), f"debug-{value}")

    def test_falsy_gateway_debug_keeps_json(self) -> None:
        """Other GATEWAY_DEBUG values (0, false, no, empty, junk) keep JSON."""
        for value in ("0", "f", "false", "no", "", "on"):
            os.environ["GATEWAY_DEBUG"] = value
            self.assertIsJSON(self.log_once(f"json-{value}"), f"json-{value}")

    def test_debug_from_env_mapping(self) -> None:
        """debug_from_env reads the given mapping when one is passed."""
        self.assertTrue(gwlog.debug_from_env({"GATEWAY_DEBUG": "yes"}))
        self.assertFalse(gwlog.debug_from_env({"GATEWAY_DEBUG": "nope"}))
        self.assertFalse(gwlog.debug_from_env({}))

    def test_configure_switches_existing_observer(self) -> None:
        """configure() after observer() was created switches its output mode and levels."""
        log = Logger(namespace="gateway.t", observer=gwlog.observer())
        log.info("before")
        gwlog.configure(True, "info", "info")
        log.info("during")
        gwlog.configure(False, "warn", "info")
        log.info("dropped")
        log.warn("after")
        first, second, third = self.stdout.getvalue().splitlines()
        self.assertIsJSON(first, "before")
        self.assertIsText(second + "\n", "during")
        self.assertEqual(json.loads(third)["message"], "after")

    def test_configure_overrides_environment(self) -> None:
        """configure(debug=False) turns a GATEWAY_DEBUG observer back to JSON."""
        os.environ["GATEWAY_DEBUG"] = "1"
        log = Logger(namespace="gateway.t", observer=gwlog.observer())
        gwlog.configure(False, "info", "info")
        log.info("json now")
        self.assertIsJSON(self.stdout.getvalue(), "json now")

    def test_configure_sets_levels(self) -> None:
        """configure() updates LEVELS, including the access log level."""
        gwlog.configure(False, "error", "debug")
        self.assertIs(gwlog.LEVELS.log_level, LogLevel.error)
        self.assertIs(gwlog.LEVELS.proxy_log_level, LogLevel.debug)
        observer = gwlog.observer()
        Logger(namespace="gateway.t", observer=observer).info("dropped")
        Logger(namespace="gateway.access", observer=observer).debug("access")
        (line,) = json_lines(self.stdout)
        self.assertEqual(line["message"], "access")

    def test_configure_rejects_bad_level_without_switching(self) -> None:
        """An invalid level makes configure() raise before changing the mode."""
        self.assertRaises(ValueError, gwlog.configure, True, "shouty", "info")
        self.assertIsJSON(self.log_once("still json"), "still json")
