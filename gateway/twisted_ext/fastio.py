"""Writing to a plain TCP transport without a reactor round trip when it is idle.

Twisted's ``FileDescriptor.write`` always buffers and registers for writability, so
every response costs two epoll updates and one more loop iteration before the first
byte leaves. When the transport's buffers are empty this sends at once (like asyncio's
transports do) and hands only an unsent remainder to ``write``. It relies on
``twisted.internet.abstract.FileDescriptor``'s buffer attributes and falls back to the
ordinary ``write`` for anything else (TLS, PROXY-protocol wrappers, closing transports).
The same buffer attributes tell the splice pipe that nothing is queued before it
(``nothing_queued``), and the HTTP/1.1 codec pauses a response's producer the way a
write past the limit would (``maybe_pause_producer``).
"""

from __future__ import annotations

from typing import Any

from twisted.internet import tcp

RELIES_ON_INSTANCE = (
    ("twisted.internet.abstract", "FileDescriptor",
     ("_tempDataBuffer", "dataBuffer", "offset", "_writeDisconnected")),
)
RELIES_ON = (
    ("twisted.internet.tcp", "Connection", ("_maybePauseProducer",)),
)

_PLAIN = (tcp.Server, tcp.Client)


def direct_writer(transport: Any) -> bool:
    """Whether ``write_now`` may bypass the buffer of this transport."""
    return (isinstance(transport, _PLAIN) and hasattr(transport, "_tempDataBuffer")
            and hasattr(transport, "dataBuffer") and hasattr(transport, "offset"))


def write_now(transport: Any, data: bytes) -> None:
    """Send ``data`` right away if nothing is queued before it, else queue it."""
    if (transport._tempDataBuffer or transport.offset != len(transport.dataBuffer)
            or not transport.connected or transport.disconnecting
            or transport._writeDisconnected):
        transport.write(data)
        return
    try:
        sent = transport.socket.send(data)
    except BlockingIOError:
        sent = 0
    except OSError:
        transport.write(data)  # let Twisted's own write path see and report the error
        return
    if sent < len(data):
        transport.write(data[sent:])


def nothing_queued(transport: Any) -> bool:
    """Whether a plain TCP transport's write buffers (both of them) are empty."""
    return not transport.dataBuffer and not transport._tempDataBuffer


def maybe_pause_producer(transport: Any) -> None:
    """Pause ``transport``'s streaming producer now if its send buffer is already past
    the limit, as Twisted does on the write that passes it; nothing on a transport
    without that check (``FileDescriptor._maybePauseProducer``)."""
    maybe_pause = getattr(transport, "_maybePauseProducer", None)
    if maybe_pause is not None:
        maybe_pause()
