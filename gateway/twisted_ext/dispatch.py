"""The epoll reactor's event loop without Twisted's per-event log context.

Twisted's ``EPollReactor.doPoll`` runs every ready descriptor's ``doRead``/``doWrite``
inside ``log.callWithLogger``: it calls the selectable's ``logPrefix()``, copies the
legacy log context, and pushes it for the call. That costs ~1.9 us an event, and a
proxied request has two events (the client's read and the upstream's): 4-7 % of its
CPU. The context only labels legacy ``log.msg``/``log.err`` events with a ``system``;
the gateway logs through ``twisted.logger``, labelled by namespace.

``lean_dispatch`` gives the reactor (an ``EPollReactor`` only; any other is left
alone) the same poll loop calling ``_doReadOrWrite`` directly; the process entry points
(``gateway.tap``, ``gateway.worker``) apply it to the global reactor before it runs. What
``callWithLogger`` added besides the label is kept: an exception that escapes an event
is logged and the loop goes on.
"""

from __future__ import annotations

import errno
from types import MethodType
from typing import Any

from twisted.internet.epollreactor import EPollReactor
from twisted.python import log

RELIES_ON = (
    ("twisted.internet.epollreactor", "EPollReactor", ("_doReadOrWrite", "doPoll")),
)
RELIES_ON_INSTANCE = (
    ("twisted.internet.epollreactor", "EPollReactor", ("_poller", "_selectables")),
)


def _do_poll(self: Any, timeout: float | None) -> None:
    """``EPollReactor.doPoll``, dispatching without ``log.callWithLogger``."""
    try:
        events = self._poller.poll(-1 if timeout is None else timeout,
                                   len(self._selectables))
    except OSError as err:
        if err.errno == errno.EINTR:
            return
        raise
    selectables = self._selectables
    dispatch = self._doReadOrWrite
    for fd, event in events:
        selectable = selectables.get(fd)
        if selectable is None:
            continue  # closed by an earlier event of this poll
        try:
            dispatch(selectable, fd, event)
        except KeyboardInterrupt:
            raise
        except BaseException:
            log.err()


def lean_dispatch(reactor: Any) -> bool:
    """Switch ``reactor`` to the lean loop; True when it is an epoll reactor."""
    if not isinstance(reactor, EPollReactor):
        return False
    reactor.doIteration = MethodType(_do_poll, reactor)  # type: ignore[method-assign]
    return True
