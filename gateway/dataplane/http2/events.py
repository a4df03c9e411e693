"""What the engine tells the codec after each read, in order.

Slotted dataclasses rather than tuples: ``mypy --strict`` checks every field where the
hand-written parser meets its consumer, and equality compares the kind too (two
``NamedTuple`` events with the same fields would be equal). Not frozen: a frozen
dataclass's ``__init__`` costs three times as much, and an event is made per frame.
"""

from __future__ import annotations

from dataclasses import dataclass

Header = tuple[bytes, bytes]


@dataclass(slots=True)
class RequestReceived:
    """A request's header block, checked (RFC 9113 8.1.1, 8.2, 8.3): a new stream."""

    stream_id: int
    headers: list[Header]
    ended: bool  # END_STREAM on the HEADERS: no body


@dataclass(slots=True)
class DataReceived:
    stream_id: int
    data: bytes  # without padding
    flow: int  # what it took of the windows (padding included): acknowledged later


@dataclass(slots=True)
class StreamEnded:
    """The request body is complete (END_STREAM, or trailers)."""

    stream_id: int


@dataclass(slots=True)
class StreamReset:
    """The client reset a stream that was open."""

    stream_id: int
    code: int
    answered: bool  # our END_STREAM was already out: the response was complete


@dataclass(slots=True)
class WindowOpened:
    """A send window grew: the stream's, or (``stream_id`` 0) the connection's or every
    stream's (SETTINGS_INITIAL_WINDOW_SIZE)."""

    stream_id: int


@dataclass(slots=True)
class ConnectionTerminated:
    """The client sent GOAWAY."""


@dataclass(slots=True)
class StreamMalformed:
    """The engine reset a stream the codec serves (a wrong body, trailers, window)."""

    stream_id: int
    why: str


@dataclass(slots=True)
class RequestRefused:
    """A malformed request, reset before it started: the codec never saw it."""

    stream_id: int
    why: str


Event = (RequestReceived | DataReceived | StreamEnded | StreamReset | WindowOpened
         | ConnectionTerminated | StreamMalformed | RequestRefused)
