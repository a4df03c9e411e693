"""Where an exchange is in its life: one value, ``ExchangeBase.stage``, changed only by
the moves named here (``routing``, ``connecting``, ``waiting``, ``responding``: the four
of every relayed request, none of which can end it) and by ``ExchangeBase.enter`` (every
move that may end it, which keeps ``finished`` beside the stage). ``NEXT`` lists the
allowed moves, and the test suite checks every write of the stage against it
(``tests/support/stage_check.py``); the data plane itself does not ask, since the check
would cost each request more than the moves do.

The response side of an exchange moves through these stages; the request side (has
the whole body arrived) is the separate ``request_done`` flag, since a body may still
be arriving while the response is sent (an early answer, a denial) or after it ended.

::

    HEAD ─► READY ─► ROUTING ─┬─► AUTHORIZING ─┐
      └──────────────┘
                              ├────────────────┴─► CONNECTING ─► WAITING ─► RESPONDING ─► DONE
                              │                       │   ▲          │           │
                              │                       │   └─ retry ──┘           └─► TUNNEL
                              │                       └─► TUNNEL (CONNECT)           (101)
                              └─► RESPONDING (an answer of the gateway's own) ─► DONE

A head the codec can begin at once goes from HEAD to ROUTING; READY is for one that
waits its turn (pipelined behind another, or held back). Any stage before TUNNEL may
end in DONE at once (the client left, the gateway gave up), and any before RESPONDING
may answer locally (RESPONDING, then DONE).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol


class Stage(IntEnum):
    HEAD = 0  # the codec is filling in the request
    READY = 1  # the request head is complete; not begun (pipelined, or held back)
    ROUTING = 2  # begun: routing, the gateway's own endpoints, the route's checks
    AUTHORIZING = 3  # waiting for an authorization decision
    CONNECTING = 4  # waiting for an upstream connection (pooled, new, or a tunnel's)
    WAITING = 5  # the request is upstream; no response head yet
    RESPONDING = 6  # a response head was made for the client (it may be held back)
    TUNNEL = 7  # over: the connection became a byte pipe (upgrade or CONNECT)
    DONE = 8  # over: answered, cut off, or the client left


HEAD, READY, ROUTING, AUTHORIZING, CONNECTING, WAITING, RESPONDING, TUNNEL, DONE = Stage
# the stages after which nothing more happens to the exchange itself
FINAL = TUNNEL
# the request is bound for an upstream that has not answered yet
UPSTREAM_BOUND = frozenset({CONNECTING, WAITING})

_BEFORE_RESPONSE = frozenset({HEAD, READY, ROUTING, AUTHORIZING, CONNECTING, WAITING})
NEXT: dict[Stage, frozenset[Stage]] = {
    HEAD: frozenset({READY, ROUTING, RESPONDING, DONE}),
    READY: frozenset({ROUTING, RESPONDING, DONE}),
    ROUTING: frozenset({AUTHORIZING, CONNECTING, RESPONDING, DONE}),
    AUTHORIZING: frozenset({CONNECTING, RESPONDING, DONE}),
    CONNECTING: frozenset({WAITING, TUNNEL, RESPONDING, DONE}),
    WAITING: frozenset({CONNECTING, RESPONDING, DONE}),
    # RESPONDING again: a held-back head is dropped and the gateway answers instead
    RESPONDING: frozenset({RESPONDING, TUNNEL, DONE}),
    TUNNEL: frozenset(),
    DONE: frozenset(),
}
assert all(RESPONDING in NEXT[stage] and DONE in NEXT[stage] for stage in _BEFORE_RESPONSE)


class Staged(Protocol):
    stage: Stage


def routing(exchange: Staged) -> None:
    """The codec begins the request (from HEAD, or READY once its turn came)."""
    exchange.stage = ROUTING


def connecting(exchange: Staged) -> None:
    """The request is bound for an upstream host: a connection is being had (routed and
    allowed, or retried on a fresh one after a pooled one failed)."""
    exchange.stage = CONNECTING


def waiting(exchange: Staged) -> None:
    """The request head is sent upstream; the response head has not come."""
    exchange.stage = WAITING


def responding(exchange: Staged) -> None:
    """A response head was made for the client (the upstream's, or the gateway's own
    answer through ``ExchangeBase.local``)."""
    exchange.stage = RESPONDING
