"""The authorization audit stream: every decision as one structured event.

The data plane calls ``AUDIT.decision`` once per decided exchange (HTTP, CONNECT,
forward auth; a request with a programmatic token is one of these, ``credential``
saying so) when it ends, with the answer's status. ``authorize_log_fields`` picks the
fields (default: all, in ``FIELDS`` order); fields without a value are left out. The
event goes

- to the log under the namespace ``gateway.audit`` (its own, so a shipper can route it)
  with ``audit_log: true``: off by default, as the file and OTLP are, because a
  decision's event is not cheap (README, "Authorization audit stream": ~35 µs a log
  line, ~10 µs a file line, ~5 µs OTLP in-process, ~30 µs a decision through the
  benchmark with the file on); nothing at all is done when the three are off or the
  log level hides info,
- to ``audit_log_file`` when set: one JSON object a line, the file created 0600,
  reopened on SIGHUP and whenever its path names another file (logrotate's rename),
- as an OTLP log record when ``otel_logs_exporter: otlp`` (``audit_otlp``, through a
  bounded queue on its own thread).

The fields: ``time`` (RFC 3339, UTC, milliseconds), ``request_id``, ``trace_id``,
``route`` (its ``name``, else its label), ``from`` (the route's ``from``), ``user_id``,
``email``, ``provider`` (the id of the identity provider that signed the person in),
``client`` (the client's address, as the access log has it), ``method``,
``host``, ``path``, ``via`` (``http``, ``connect``, ``forward-auth``, ``recheck``: an
open tunnel or upgraded connection refused by its periodic check, and closed),
``credential`` (``token``: a programmatic token, ``bearer``: a bearer token from an
outside issuer, ``cookie``, ``none``), ``decision``
(``allow`` or ``deny``), ``status`` (what the client was answered), ``reasons`` (the
reason codes, a list), ``rule`` (with the policy language: the rule and criterion that
decided), ``ssh_user`` (the login name of an SSH decision, ``via="ssh"``: the field the
native SSH server's decisions are to be reported with, through ``AUDIT.decision``).
An MCP route's request is one event per JSON-RPC message (``via: mcp``), with
``client_id`` (the MCP client acting for the person, the ``Caller``'s), ``mcp_method``
(the JSON-RPC method), ``mcp_name`` (the tool or prompt name, the resource URI),
``mcp_id`` (the message's JSON-RPC id, as text) and ``arguments_sha256`` (the SHA-256 of
its arguments' bytes as sent, ``mcp.jsonrpc.arguments_sha256``: never the arguments);
``decision``, ``reasons`` and ``rule`` are then that message's, ``status`` the HTTP request's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from twisted.logger import Logger

from gateway.config.audit_fields import AUDIT_FIELDS
from gateway.observability.logging import LEVELS, _rfc3339
from gateway.private_dirs import make_private_dirs
from gateway.sessions.bearer import programmatic_token

NAMESPACE = "gateway.audit"
FIELDS = AUDIT_FIELDS
audit_log = Logger(namespace=NAMESPACE)
_POLICY_PREFIX = "policy-"
_DENIED_PREFIX = "denied: "
FLUSH_DELAY = 0.05  # seconds a file line may wait to be written with others
FLUSH_BYTES = 65536
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # (json.dumps makes one a call)
_MESSAGE_PARTS = (("decision",), ("method",), ("host", "path"), ("status",))


def message_of(fields: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The log line's format (``allow GET app.example.com/path 200``) made of the chosen
    fields, and those of its fields the event must have (empty when without value)."""
    parts = [("".join(f"{{{name}}}" for name in part if name in fields))
             for part in _MESSAGE_PARTS]
    used = tuple(name for part in _MESSAGE_PARTS for name in part if name in fields)
    return " ".join(p for p in parts if p) or "authorization decision", used


def reasons_and_rule(reason: str) -> tuple[list[str], str]:
    """A decision's reason as logged (``Allow.reason``, ``Reply.reason``) split into its
    codes and, for the policy language (``decide.decision_reason``: ``code rule
    criterion: outcome``), the rule that decided."""
    if reason.startswith(_DENIED_PREFIX):
        reason = reason[len(_DENIED_PREFIX):]
    if reason.startswith(_POLICY_PREFIX):
        code, _, rule = reason.partition(" ")
        return [code], rule
    return [r for r in reason.split(", ") if r], ""


def credential_of(headers: list[tuple[bytes, bytes]], user_id: str, *,
                  bearer: bool = False) -> str:
    """``bearer`` (a bearer token from an outside issuer: the caller has no session,
    ``bearer``), ``token`` (a programmatic token), ``cookie`` (a session, so its cookie)
    or ``none``."""
    if bearer:
        return "bearer"
    if programmatic_token(headers):
        return "token"
    return "cookie" if user_id else "none"


class AuditFile:
    """JSON lines appended to ``path`` (created 0600, a missing directory 0700);
    ``reopen`` starts a new file when the path names another one than the open file
    (renamed away or removed).

    With ``schedule`` (the reactor's ``callLater``) lines are gathered and written
    together ``FLUSH_DELAY`` after the first of them (or at ``FLUSH_BYTES``): one
    ``write`` call for many decisions, the cost that mattered under load. What a
    ``kill -9`` loses is at most that much; a stop, a reopen and a close write first.
    Reactor thread only."""

    def __init__(self, path: str,
                 schedule: Callable[[float, Callable[[], None]], object] | None = None
                 ) -> None:
        self.path = path
        self.schedule = schedule
        self.pending: list[bytes] = []
        self.size = 0
        self.flush_due = False
        self.fd = self._open()

    def _open(self) -> int:
        # a missing directory is made (0700, as the recordings'); an existing one is the
        # operator's and stays as it is
        make_private_dirs(os.path.dirname(os.path.abspath(self.path)))
        return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def write(self, line: bytes) -> None:
        if self.schedule is None:
            self._write_all(line)
            return
        self.pending.append(line)
        self.size += len(line)
        if self.size >= FLUSH_BYTES:
            self.flush()
        elif not self.flush_due:
            self.flush_due = True
            self.schedule(FLUSH_DELAY, self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self.flush_due = False
        self.flush()

    def flush(self) -> None:
        if self.pending and self.fd >= 0:
            data = b"".join(self.pending)
            self.pending.clear()
            self.size = 0
            self._write_all(data)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def moved(self) -> bool:
        try:
            on_disk = os.stat(self.path)
        except FileNotFoundError:
            return True
        mine = os.fstat(self.fd)
        return (on_disk.st_ino, on_disk.st_dev) != (mine.st_ino, mine.st_dev)

    def reopen(self, force: bool = False) -> bool:
        """True when a new file was opened (what was gathered goes to the old one)."""
        if not force and not self.moved():
            return False
        fd = self._open()
        self.flush()
        old, self.fd = self.fd, fd
        os.close(old)
        return True

    def close(self) -> None:
        self.flush()
        os.close(self.fd)
        self.fd = -1


@dataclass(frozen=True, slots=True)
class McpFields:
    """An MCP message's own fields of its event (``via: mcp``); ``rule`` and
    ``reasons`` its verdict's, in place of those the request's reason names."""

    client_id: str
    method: str
    name: str
    id: str
    arguments_sha256: str
    rule: str = ""
    reasons: tuple[str, ...] = ()


_NO_MCP = ("", "", "", "", "")


class AuditStream:
    """What the running configuration asks for; swapped in place by ``AuditService``."""

    def __init__(self) -> None:
        self.fields: tuple[str, ...] = FIELDS
        self.indices = tuple(range(len(FIELDS)))
        self.message, self.message_fields = message_of(FIELDS)
        self.log = False  # (audit_log's default; AuditService applies the settings)
        self.file: AuditFile | None = None
        self.otlp: Callable[[tuple[float, dict[str, Any]]], None] | None = None
        self.enabled = False  # any of the three

    def configure(self, fields: tuple[str, ...], log: bool, file: AuditFile | None,
                  otlp: Callable[[tuple[float, dict[str, Any]]], None] | None) -> None:
        self.fields = tuple(f for f in FIELDS if f in fields) if fields else FIELDS
        self.indices = tuple(FIELDS.index(f) for f in self.fields)
        self.message, self.message_fields = message_of(self.fields)
        self.log = log
        self.file = file
        self.otlp = otlp
        # (read per request; the log levels are applied before this on a reload)
        self.enabled = bool((log and LEVELS.info_logged) or file is not None
                            or otlp is not None)

    def decision(self, when: float, request_id: str, trace_id: str, route: str,
                 route_from: str, user_id: str, email: str, client: str, method: str,
                 host: str, path: str, via: str, credential: str, allowed: bool,
                 status: int, reason: str, ssh_user: str = "", provider: str = "",
                 mcp: McpFields | None = None) -> None:
        reasons, rule = reasons_and_rule(reason)
        if mcp is not None:
            rule = mcp.rule  # (the message's verdict, not the request's)
            reasons = list(mcp.reasons)
            extra: tuple[str, ...] = (mcp.client_id, mcp.method, mcp.name, mcp.id,
                                      mcp.arguments_sha256)
        else:
            extra = _NO_MCP
        values = (_rfc3339(when), request_id, trace_id, route, route_from, user_id, email,
                  provider, client, method, host, path, via, credential,
                  "allow" if allowed else "deny", status, reasons, rule, ssh_user, *extra)
        # (in FIELDS order; status is kept whatever its value, the others when not empty)
        event = {name: value for name, value in zip(self.fields, (
            values[i] for i in self.indices), strict=True) if value or name == "status"}
        if self.log and LEVELS.info_logged:
            # (the log line has a time of its own; the message's fields the chosen ones
            # may leave out are given empty)
            fields = {k: v for k, v in event.items() if k != "time"}
            for name in self.message_fields:
                fields.setdefault(name, "")
            audit_log.info(self.message, **fields)
        if self.file is not None:
            self.file.write(_ENCODE(event).encode() + b"\n")
        if self.otlp is not None:
            self.otlp((when, event))


AUDIT = AuditStream()
