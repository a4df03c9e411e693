"""One stream's state as the engine keeps it (the engine alone changes it; the codec
holds it for a stream it serves, and reads it)."""

from __future__ import annotations

from gateway.dataplane.http2.protocol import DEFAULT_WINDOW


class Stream:
    """Flow-control and state of one open (or half-closed) stream. ``local_ended``: our
    END_STREAM is out, and also set when the stream leaves the engine (reset by either
    side, dropped with the connection), so a codec holding this object knows nothing
    more may be sent on it without asking by stream id."""

    __slots__ = ("expected", "in_unacked", "in_window", "local_ended", "out_window",
                 "received", "remote_ended")

    def __init__(self, out_window: int) -> None:
        self.out_window = out_window  # what we may still send
        self.in_window = DEFAULT_WINDOW  # what the client may still send
        self.in_unacked = 0
        self.remote_ended = False
        self.local_ended = False
        self.expected: int | None = None  # content-length of the request
        self.received = 0
