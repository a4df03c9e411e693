"""The audit stream's pure parts and its file: reasons and the deciding rule from a
decision's reason, the credential, the chosen fields and the log line made of them, the
JSON-lines file (0600, reopened when moved or on demand), and validation of
``authorize_log_fields``."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from typing import Any

from twisted.logger import LogEvent, globalLogPublisher
from twisted.trial.unittest import SynchronousTestCase

from gateway.config import ConfigErrors, load_snapshot
from gateway.observability.audit import (
    FIELDS,
    AuditFile,
    AuditStream,
    credential_of,
    message_of,
    reasons_and_rule,
)
from gateway.observability.logging import LEVELS


def decide(stream: AuditStream, **overrides: Any) -> None:
    values: dict[str, Any] = dict(
        when=1_700_000_000.25, request_id="r1", trace_id="", route="app",
        route_from="https://app.example.com", user_id="u1", email="a@example.com",
        client="192.0.2.1", method="GET", host="app.example.com", path="/p", via="http",
        credential="cookie", allowed=True, status=200, reason="allowed-user",
        provider="corp")
    values.update(overrides)
    stream.decision(**values)


class ReasonTests(SynchronousTestCase):
    def test_policy_reason_names_the_rule(self) -> None:
        self.assertEqual(
            reasons_and_rule("policy-deny-matched deny[0].or[1] source_ip: matched"),
            (["policy-deny-matched"], "deny[0].or[1] source_ip: matched"))

    def test_a_denial_of_the_policy_language(self) -> None:
        self.assertEqual(
            reasons_and_rule("denied: policy-no-allow-matched allow: not matched"),
            (["policy-no-allow-matched"], "allow: not matched"))

    def test_allow_fields_reasons_are_codes_only(self) -> None:
        self.assertEqual(reasons_and_rule("denied: user-not-allowed, email-unverified"),
                         (["user-not-allowed", "email-unverified"], ""))
        self.assertEqual(reasons_and_rule(""), ([], ""))

    def test_credential(self) -> None:
        self.assertEqual(credential_of([(b"Authorization", b"Gateway abc")], "u"), "token")
        self.assertEqual(credential_of([(b"authorization", b"Bearer Gateway-abc")], ""),
                         "token")
        self.assertEqual(credential_of([(b"authorization", b"Bearer abc")], "u"), "cookie")
        self.assertEqual(credential_of([], ""), "none")


class StreamTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.path = os.path.join(self.dir, "audit.jsonl")
        self.events: list[LogEvent] = []
        globalLogPublisher.addObserver(self.events.append)
        self.addCleanup(globalLogPublisher.removeObserver, self.events.append)

    def lines(self, path: str | None = None) -> list[dict[str, Any]]:
        with open(path or self.path) as f:
            return [json.loads(line) for line in f]

    def audit_events(self) -> list[LogEvent]:
        return [e for e in self.events if e.get("log_namespace") == "gateway.audit"]

    def test_every_field_in_order_empty_ones_left_out(self) -> None:
        stream = AuditStream()
        file = AuditFile(self.path)
        self.addCleanup(file.close)
        stream.configure((), True, file, None)
        decide(stream)
        [line] = self.lines()
        self.assertEqual(list(line), [f for f in FIELDS if f not in (
            "trace_id", "rule", "ssh_user", "client_id", "mcp_method", "mcp_name", "mcp_id",
            "arguments_sha256")])
        self.assertEqual(line["time"], "2023-11-14T22:13:20.250Z")
        self.assertEqual(line["reasons"], ["allowed-user"])
        self.assertEqual(line["decision"], "allow")
        self.assertEqual(line["provider"], "corp")  # the identity provider that signed in
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)
        [event] = self.audit_events()
        self.assertEqual(event["log_format"], "{decision} {method} {host}{path} {status}")
        self.assertEqual(event["from"], "https://app.example.com")

    def test_chosen_fields(self) -> None:
        stream = AuditStream()
        file = AuditFile(self.path)
        self.addCleanup(file.close)
        stream.configure(("request_id", "status", "decision"), False, file, None)
        decide(stream, allowed=False, status=403)
        self.assertEqual(self.lines(), [{"request_id": "r1", "status": 403, "decision": "deny"}])
        self.assertEqual(self.audit_events(), [])

    def test_log_line_of_chosen_fields(self) -> None:
        self.assertEqual(message_of(("decision", "path")), ("{decision} {path}",
                                                            ("decision", "path")))
        self.assertEqual(message_of(("email",)), ("authorization decision", ()))
        stream = AuditStream()
        stream.configure(("decision", "path", "email"), True, None, None)
        decide(stream, path="")  # a CONNECT has no path
        [event] = self.audit_events()
        self.assertEqual((event["path"], event["decision"]), ("", "allow"))

    def test_otlp_gets_the_time_and_the_event(self) -> None:
        got: list[tuple[float, dict[str, Any]]] = []
        stream = AuditStream()
        stream.configure((), False, None, got.append)
        decide(stream, trace_id="ab" * 16)
        [(when, event)] = got
        self.assertEqual(when, 1_700_000_000.25)
        self.assertEqual(event["trace_id"], "ab" * 16)

    def test_nothing_configured_is_off(self) -> None:
        stream = AuditStream()
        stream.configure((), False, None, None)
        self.assertFalse(stream.enabled)

    def test_log_hidden_by_the_level_is_off(self) -> None:
        """log_level warn hides the events: the data plane makes none."""
        stream = AuditStream()
        self.addCleanup(LEVELS.set_levels, "info", "info")
        LEVELS.set_levels("warn", "info")
        stream.configure((), True, None, None)
        self.assertFalse(stream.enabled)
        LEVELS.set_levels("info", "info")
        stream.configure((), True, None, None)
        self.assertTrue(stream.enabled)

    def test_file_reopened_when_moved_or_asked(self) -> None:
        file = AuditFile(self.path)
        self.addCleanup(file.close)
        self.assertFalse(file.reopen())
        file.write(b'{"n":1}\n')
        os.rename(self.path, self.path + ".1")
        file.write(b'{"n":2}\n')  # before the reopen: at the end of the renamed file
        self.assertTrue(file.reopen())
        file.write(b'{"n":3}\n')
        self.assertEqual(self.lines(self.path + ".1"), [{"n": 1}, {"n": 2}])
        self.assertEqual(self.lines(), [{"n": 3}])
        self.assertTrue(file.reopen(force=True))
        file.write(b'{"n":4}\n')
        self.assertEqual(self.lines(), [{"n": 3}, {"n": 4}])
        os.unlink(self.path)
        self.assertTrue(file.reopen())
        self.assertEqual(stat.S_IMODE(os.stat(self.path).st_mode), 0o600)


class ValidationTests(SynchronousTestCase):
    def test_unknown_field_named(self) -> None:
        with self.assertRaises(ConfigErrors) as caught:
            load_snapshot(None, {"AUTHORIZE_LOG_FIELDS": "request_id,ip,decision",
                                 "INSECURE_SERVER": "true"})
        [problem] = [p for p in caught.exception.problems
                     if p.path == "authorize_log_fields"]
        self.assertIn("unknown field ip", str(problem))


class SshTests(SynchronousTestCase):
    def test_an_ssh_decision(self) -> None:
        got: list[tuple[float, dict[str, Any]]] = []
        stream = AuditStream()
        stream.configure((), False, None, got.append)
        decide(stream, via="ssh", method="", path="", ssh_user="root", allowed=False,
               status=0, reason="denied: policy-no-allow-matched allow: not matched")
        [(_, event)] = got
        self.assertEqual((event["via"], event["ssh_user"], event["decision"]),
                         ("ssh", "root", "deny"))
        self.assertNotIn("path", event)


class GatheredWritesTests(SynchronousTestCase):
    """With the reactor's callLater, lines are written together FLUSH_DELAY after the
    first; a reopen writes what was gathered to the old file first, a close too."""

    def setUp(self) -> None:
        from twisted.internet.task import Clock

        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.path = os.path.join(self.dir, "audit.jsonl")
        self.clock = Clock()

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def test_written_together_after_the_delay(self) -> None:
        from gateway.observability.audit import FLUSH_DELAY

        file = AuditFile(self.path, self.clock.callLater)
        self.addCleanup(file.close)
        file.write(b"1\n")
        file.write(b"2\n")
        self.assertEqual(self.read(self.path), b"")
        self.clock.advance(FLUSH_DELAY)
        self.assertEqual(self.read(self.path), b"1\n2\n")
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_a_full_buffer_is_written_at_once(self) -> None:
        from gateway.observability.audit import FLUSH_BYTES

        file = AuditFile(self.path, self.clock.callLater)
        self.addCleanup(file.close)
        line = b"x" * 1023 + b"\n"
        for _ in range(FLUSH_BYTES // len(line)):
            file.write(line)
        self.assertEqual(len(self.read(self.path)), FLUSH_BYTES)

    def test_reopen_and_close_write_first(self) -> None:
        file = AuditFile(self.path, self.clock.callLater)
        file.write(b"old\n")
        os.rename(self.path, self.path + ".1")
        self.assertTrue(file.reopen())
        file.write(b"new\n")
        file.close()
        self.assertEqual(self.read(self.path + ".1"), b"old\n")
        self.assertEqual(self.read(self.path), b"new\n")
        self.clock.advance(1)  # the flush still scheduled finds the file closed
