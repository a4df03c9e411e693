"""Server-Sent Events, read incrementally and written (the HTML standard's
``text/event-stream``, section 9.2), for the MCP list filter on a streamed response.

``SseReader.feed`` takes the stream in whatever pieces the network brings and returns
each complete block (the lines up to and including the blank line that ends them) as an
``SseEvent``: its raw bytes, so an event the gateway leaves alone is passed on byte for
byte, and its fields in order. Lines end with CRLF, LF or CR, a CR at the end of one
piece and an LF at the start of the next being one line end (that LF is dropped when the
CR ended a block already passed on: the CR ends the line on its own); a UTF-8 byte order
mark at the start of the stream is skipped; a comment (a line starting with ``:``) and a line
without a colon (a field with an empty value) are kept; one space after the colon is
not part of the value. ``write_event`` and ``SseEvent.with_data`` make a block again,
the latter keeping the event's other fields (``id``, ``event``, ``retry``, comments)
where they were.

A block is bounded (``max_event_bytes``): an event that grows past it raises
``EventTooLarge`` (the filter then fails closed) rather than being buffered without
end. What is left unfinished when the stream ends is not an event: a browser discards
it, and ``SseReader.close`` returns its bytes for the caller to decide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BOM = b"\xef\xbb\xbf"
_COMMENT = ":"
_NEWLINES = re.compile(r"\r\n|\r|\n")


class EventTooLarge(ValueError):
    """A single event grew past the reader's bound."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One block of the stream. ``fields``: ``(name, value)`` in order, a comment as
    ``(":", text)``; ``raw``: the bytes it was read from (its line ends included)."""

    raw: bytes
    fields: tuple[tuple[str, str], ...]

    @property
    def data(self) -> str | None:
        """The data lines joined with LF (the standard's data buffer without its last
        LF); ``None`` when the block has no data line (a browser dispatches nothing)."""
        lines = [value for name, value in self.fields if name == "data"]
        return "\n".join(lines) if lines else None

    @property
    def event(self) -> str | None:
        return self._last("event")

    @property
    def id(self) -> str | None:
        """The last ``id`` field; one holding NUL is ignored, as the standard says."""
        ids = [value for name, value in self.fields if name == "id" and "\0" not in value]
        return ids[-1] if ids else None

    @property
    def retry(self) -> int | None:
        values = [value for name, value in self.fields
                  if name == "retry" and value.isascii() and value.isdigit()]
        return int(values[-1]) if values else None

    @property
    def comments(self) -> tuple[str, ...]:
        return tuple(value for name, value in self.fields if name == _COMMENT)

    def _last(self, field: str) -> str | None:
        values = [value for name, value in self.fields if name == field]
        return values[-1] if values else None

    def with_data(self, data: str) -> bytes:
        """This block written again with ``data`` in place of its data lines (at the
        first one's place), every other field and comment kept in order."""
        out: list[str] = []
        written = False
        for name, value in self.fields:
            if name == "data":
                if not written:
                    out.extend(_data_lines(data))
                    written = True
                continue
            out.append(_line(name, value))
        if not written:
            out.extend(_data_lines(data))
        return ("".join(out) + "\n").encode()


def _line(name: str, value: str) -> str:
    if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
        raise ValueError(f"an SSE {name or 'comment'} field cannot hold a line break")
    if name == _COMMENT:
        return f":{value}\n"
    return f"{name}: {value}\n" if value else f"{name}\n"


def _data_lines(data: str) -> list[str]:
    return [f"data: {line}\n" if line else "data\n" for line in _NEWLINES.split(data)]


def write_event(data: str | None = None, *, event: str | None = None,
                id: str | None = None, retry: int | None = None,
                comments: tuple[str, ...] = ()) -> bytes:
    """One block: comments, ``event``, ``id``, ``retry``, then ``data`` (one data line
    per line of it), ended by a blank line."""
    out = [_line(_COMMENT, text) for text in comments]
    if event is not None:
        out.append(_line("event", event))
    if id is not None:
        out.append(_line("id", id))
    if retry is not None:
        out.append(_line("retry", str(retry)))
    if data is not None:
        out.extend(_data_lines(data))
    return ("".join(out) + "\n").encode()


def _field(line: bytes) -> tuple[str, str]:
    text = line.decode("utf-8", "replace")
    if text.startswith(_COMMENT):
        return _COMMENT, text[1:]
    name, colon, value = text.partition(":")
    if colon and value.startswith(" "):
        value = value[1:]
    return name, value


class SseReader:
    """Blocks of an event stream, from its bytes in any pieces."""

    def __init__(self, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = bytearray()  # bytes not yet part of a finished line
        self._block = bytearray()  # the raw bytes of the block so far (finished lines)
        self._fields: list[tuple[str, str]] = []
        self._started = False  # past the (optional) byte order mark
        self._after_cr = False  # the last line ended with a CR: an LF next is its end

    def feed(self, data: bytes) -> list[SseEvent]:
        """The blocks ``data`` completes (none while an event is unfinished)."""
        buffer = self._buffer
        buffer += data
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(bytes(buffer)):
                return []  # (could still be the start of a byte order mark)
            self._started = True
            if buffer.startswith(_BOM):
                self._block += _BOM
                del buffer[:len(_BOM)]
        events: list[SseEvent] = []
        start = 0
        size = len(buffer)
        if self._after_cr and size:
            self._after_cr = False
            if buffer[0] == 0x0A:  # the LF of a CRLF split across pieces
                # (after a CR that ended a block, which went on with it: dropped, as the
                # CR ends the line on its own; else kept with the block it belongs to)
                if self._block or self._fields:
                    self._block += b"\n"
                start = 1
        while start < size:
            lf = buffer.find(b"\n", start)
            cr = buffer.find(b"\r", start, lf if lf >= 0 else size)
            if cr >= 0:
                end = cr
                if cr + 1 < size:
                    after = cr + 2 if buffer[cr + 1] == 0x0A else cr + 1
                else:
                    after = cr + 1
                    self._after_cr = True
            elif lf >= 0:
                end, after = lf, lf + 1
            else:
                break
            line = bytes(buffer[start:end])
            self._block += buffer[start:after]
            start = after
            if line:
                self._fields.append(_field(line))
            else:
                if len(self._block) > self.max_event_bytes:
                    raise EventTooLarge(f"an event larger than {self.max_event_bytes} bytes")
                events.append(SseEvent(bytes(self._block), tuple(self._fields)))
                self._block.clear()
                self._fields.clear()
        del buffer[:start]
        if len(self._block) + len(buffer) > self.max_event_bytes:
            raise EventTooLarge(f"an event grew past {self.max_event_bytes} bytes")
        return events

    def close(self) -> bytes:
        """The stream ended: the bytes of an unfinished block (``b""``: none)."""
        rest = bytes(self._block) + bytes(self._buffer)
        self._block.clear()
        self._buffer.clear()
        self._fields.clear()
        return rest
