"""Where an exchange is in its life: one value, ``ExchangeBase.stage``. ``NEXT`` lists
the allowed moves, and ``MOVED_BY`` names the one exchange method that makes each: the
four moves of every relayed request, none of which can end it, are plain writes of the
slot by the method named for them (``begin`` to ROUTING, ``dispatch`` to CONNECTING,
``attach`` to WAITING, ``local`` and ``upstream_head`` to RESPONDING; as calls of a
function here they cost 1.3 % of a request's CPU in ``bench/inproc.py``), every other
move, and every one that may end the exchange, is made by ``ExchangeBase.enter``, which
keeps ``finished`` beside the stage. The test suite holds every write of the stage to
both tables (``tests/support/stage_check.py``); the data plane itself does not ask,
since the check would cost each request more than the moves do.

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

An MCP route's POST may wait in AUTHORIZING twice: asked about before its body is read,
then decided with the messages the body holds (``mcp_request.py``). A head the codec can
begin at once goes from HEAD to ROUTING; READY is for one that waits its turn (pipelined
behind another, or held back). Any stage before TUNNEL may end in DONE at once (the
client left, the gateway gave up), and any before RESPONDING may answer locally
(RESPONDING, then DONE).
"""

from __future__ import annotations

from enum import IntEnum


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
    # AUTHORIZING again: an MCP route's POST is asked about before its body is read
    # and decided again with its messages (exchange/mcp_request.py)
    AUTHORIZING: frozenset({AUTHORIZING, CONNECTING, RESPONDING, DONE}),
    CONNECTING: frozenset({WAITING, TUNNEL, RESPONDING, DONE}),
    WAITING: frozenset({CONNECTING, RESPONDING, DONE}),
    # RESPONDING again: a held-back head is dropped and the gateway answers instead
    RESPONDING: frozenset({RESPONDING, TUNNEL, DONE}),
    TUNNEL: frozenset(),
    DONE: frozenset(),
}
assert all(RESPONDING in NEXT[stage] and DONE in NEXT[stage] for stage in _BEFORE_RESPONSE)

# The exchange method that makes each move (a write of ``stage`` anywhere else fails the
# test that made it): ``enter`` for every move that may end the exchange or is off the
# common path; the name of the one method that writes it for the four of every relayed
# request (``__init__`` sets the first stage).
MOVED_BY: dict[Stage, frozenset[str]] = {
    HEAD: frozenset({"__init__"}),
    READY: frozenset({"enter"}),
    ROUTING: frozenset({"begin"}),
    AUTHORIZING: frozenset({"enter"}),
    CONNECTING: frozenset({"dispatch", "enter"}),  # enter: a CONNECT's tunnel
    WAITING: frozenset({"attach"}),
    RESPONDING: frozenset({"local", "upstream_head"}),
    TUNNEL: frozenset({"enter"}),
    DONE: frozenset({"enter"}),
}
assert all(MOVED_BY[stage] == {"enter"} for stage in Stage if stage >= FINAL)
