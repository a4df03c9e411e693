"""Outcomes of the soak's requests, the fault timeline, and the classification:

* ``ok``: the answer the request asked for, byte-exact;
* ``expected``: a failure that a fault explains: the fault the request itself provoked
  (a ``fault.test`` path), or a fault window of a component the request depends on that
  overlaps the request (plus a short grace after the component is back);
* ``unexplained``: anything else (wrong bytes, a wrong status, a stall, a connection the
  gateway dropped without cause).
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field

OK, EXPECTED, UNEXPLAINED = "ok", "expected", "unexplained"

#: Client-side errors (``Outcome.error``):
TIMEOUT = "timeout"  # no answer (status line, body bytes, frame) within the socket timeout
REFUSED = "refused"  # could not connect to the gateway at all
CLOSED = "closed-before-response"  # EOF before a status line
RESET = "reset-before-response"  # ECONNRESET before a status line
TRUNCATED = "truncated"  # the body ended (EOF, RST, bad chunk) before its length
STREAM_RESET = "stream-reset"  # HTTP/2 RST_STREAM from the gateway
CONN_LOST = "connection-lost"  # HTTP/2 GOAWAY or EOF while the stream was open
LOST_WITH_CONNECTION = "lost-with-connection"  # pipelined; an earlier response was cut
BAD_BYTES = "bad-bytes"  # bytes differ from what the upstream sent
BAD_FRAMING = "bad-framing"  # unparseable response
BAD_HEADERS = "bad-headers"  # a header that must be there (or match) does not
NOT_CLOSED = "not-closed"  # Connection: close, but the gateway kept the connection open
SIGNIN = "sign-in-failed"  # the sign-in flow did not end on the route with a session

#: Errors a fault window may explain (besides 502/503/504 answers): the answer was cut
#: off, or the connection closed before its head reached us (the gateway had queued the
#: head when the upstream broke, and aborting the connection dropped it).
CUT_ERRORS = frozenset({TRUNCATED, STREAM_RESET, LOST_WITH_CONNECTION, CLOSED, RESET})
_CUT_MID_BODY = frozenset({(200, TRUNCATED), (200, STREAM_RESET), (502, None),
                           (None, CLOSED), (None, RESET), (None, STREAM_RESET)})
FAULT_STATUSES = frozenset({502, 503, 504})

#: What each fault path of the fault upstream may legitimately end in: (status, error).
FAULT_RESULTS: dict[str, frozenset[tuple[int | None, str | None]]] = {
    "close-mid-body": _CUT_MID_BODY,
    "reset-mid-body": _CUT_MID_BODY,
    "chunked-mid-body": _CUT_MID_BODY,
    "close-before-headers": frozenset({(502, None)}),
    "reset-before-headers": frozenset({(502, None)}),
    "hang": frozenset({(504, None)}),
}


@dataclass(frozen=True)
class Outcome:
    status: int | None = None
    error: str | None = None
    received: int = 0
    wait: float = 0.0  # seconds until the response head (or the error)
    elapsed: float = 0.0
    note: str = ""


@dataclass(frozen=True)
class Req:
    """What a request was for: enough to judge its outcome."""

    scenario: str
    label: str  # e.g. "GET nginx.test/64m"
    status: int  # the status asked for (ignored for a fault path)
    deps: tuple[str, ...] = ()  # components the answer depends on
    fault: str | None = None  # a fault.test path: the fault it provokes
    note: str = ""  # shown with an unexplained outcome


@dataclass
class Window:
    component: str
    what: str  # e.g. "killed", "down"
    start: float
    end: float | None = None
    recovered_after: float | None = None  # until a probe through the gateway succeeded


class Timeline:
    """Fault windows: [start, end + grace] of each component outage."""

    def __init__(self, grace: dict[str, float]) -> None:
        self.grace = grace
        self.windows: list[Window] = []
        self._lock = threading.Lock()

    def open(self, component: str, what: str) -> Window:
        w = Window(component, what, time.monotonic())
        with self._lock:
            self.windows.append(w)
        return w

    def close(self, w: Window) -> None:
        w.end = time.monotonic()

    def explaining(self, deps: tuple[str, ...], start: float, end: float) -> Window | None:
        with self._lock:
            windows = list(self.windows)
        for w in windows:
            if w.component not in deps:
                continue
            w_end = (w.end if w.end is not None else float("inf")) + self.grace.get(
                w.component, 2.0)
            if start <= w_end and end >= w.start:
                return w
        return None


@dataclass
class Stats:
    requests: int = 0
    ok: int = 0
    expected: Counter[str] = field(default_factory=Counter)
    unexplained: int = 0
    stalls: int = 0
    latencies: array[float] = field(default_factory=lambda: array("d"))
    max_wait: float = 0.0


@dataclass
class Pending:
    req: Req
    outcome: Outcome
    start: float
    end: float


@dataclass
class Unexplained:
    at: float  # seconds since the soak started
    scenario: str
    label: str
    what: str  # status / error
    elapsed: float
    note: str


class Recorder:
    """Thread-safe: workers ``record``; ``finish`` classifies what was not plainly ok."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.stats: dict[str, Stats] = {}
        self.pending: list[Pending] = []
        self.unexplained: list[Unexplained] = []
        self.unexplained_kinds: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _stats(self, scenario: str) -> Stats:
        s = self.stats.get(scenario)
        if s is None:
            s = self.stats[scenario] = Stats()
        return s

    def record(self, req: Req, outcome: Outcome, start: float) -> bool:
        """Record one request; True when it was plainly ok."""
        end = start + outcome.elapsed
        plainly_ok = req.fault is None and outcome.error is None and outcome.status == req.status
        with self._lock:
            s = self._stats(req.scenario)
            s.requests += 1
            s.latencies.append(outcome.elapsed)
            s.max_wait = max(s.max_wait, outcome.wait)
            if plainly_ok:
                s.ok += 1
            else:
                self.pending.append(Pending(req, outcome, start, end))
        return plainly_ok

    def finish(self, timeline: Timeline) -> None:
        """Classify every pending outcome (after the last fault window has closed)."""
        with self._lock:
            pending, self.pending = self.pending, []
        for p in pending:
            kind, label = classify(p.req, p.outcome, p.start, p.end, timeline)
            s = self._stats(p.req.scenario)
            if kind == OK:
                s.ok += 1
            elif kind == EXPECTED:
                s.expected[label] += 1
            else:
                s.unexplained += 1
                if p.outcome.error == TIMEOUT:
                    s.stalls += 1
                what = (f"{p.outcome.status} " if p.outcome.status else "") + (
                    p.outcome.error or "")
                self.unexplained_kinds[f"{p.req.label}: {what.strip()}"] += 1
                note = "; ".join(x for x in (p.outcome.note, p.req.note) if x)
                self.unexplained.append(Unexplained(
                    p.start - self.t0, p.req.scenario, p.req.label, what.strip(),
                    p.outcome.elapsed, note))


def classify(req: Req, o: Outcome, start: float, end: float,
             timeline: Timeline) -> tuple[str, str]:
    if o.error in (TIMEOUT, BAD_BYTES, BAD_FRAMING, REFUSED, NOT_CLOSED, BAD_HEADERS):
        return UNEXPLAINED, ""
    if req.fault is not None:
        if (o.status, o.error) in FAULT_RESULTS.get(req.fault, frozenset()):
            return EXPECTED, req.fault
        return UNEXPLAINED, ""
    if o.error is None and o.status == req.status:
        return OK, ""
    cut = (o.error is None and o.status in FAULT_STATUSES) or o.error in CUT_ERRORS or (
        o.error == SIGNIN)
    if cut:
        w = timeline.explaining(req.deps, start, end)
        if w is not None:
            return EXPECTED, f"{w.component} {w.what}"
    return UNEXPLAINED, ""
