"""Standard input and output as the local end of ``gateway tcp --listen -``.

Twisted's ``StandardIO`` has no ``abortConnection``, and the tunnel's pipe aborts both of
its ends when either is reset (and aborts any end still open ``CLOSE_GRACE`` after an
orderly close). Without it the abort raised inside the pipe, the process never learnt
its transport was gone, and an ``ssh -o ProxyCommand='gateway tcp --listen - ...'``
session that had ended kept ``gateway tcp`` (and so ssh's stderr) open for ever.

And ``StandardIO.loseConnection`` only ends the transport when its writer finishes: if
stdout had already gone (ssh exited and closed its end first), it waited for ever, which
is how that session came to need the abort at all.
"""

from __future__ import annotations

from twisted.internet.error import ConnectionAborted, ConnectionDone
from twisted.internet.stdio import StandardIO
from twisted.python.failure import Failure

from gateway.twisted_ext.stdio import writer_gone


class StdioEnds(StandardIO):
    """``StandardIO`` that can be aborted like a socket: both descriptors are closed at
    once, what is not yet written is dropped, and the protocol's ``connectionLost``
    runs (which ends the process in stdio mode)."""

    def loseConnection(self) -> None:
        super().loseConnection()  # type: ignore[no-untyped-call]
        if writer_gone(self) and not self.disconnected:  # stdout gone
            self.connectionLost(Failure(ConnectionDone()))  # type: ignore[attr-defined]

    def abortConnection(self) -> None:
        if self.disconnected:
            return
        self.disconnecting = True
        # (POSIX StandardIO has connectionLost; the Windows one, in the stubs, not.)
        self.connectionLost(Failure(ConnectionAborted()))  # type: ignore[attr-defined]
