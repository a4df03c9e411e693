"""Session recordings as asciicast v2 (what ``asciinema play`` reads): a header line,
then one JSON array per event, ``[seconds, "o"|"i"|"r", text]``. Text is decoded
incrementally, so a UTF-8 character split across two reads is written once, whole.

Pure: ``Cast`` turns a session's events into the lines of its file; writing them is
``recorder``'s (off the reactor thread).
"""

from __future__ import annotations

import codecs
import json


def header(width: int, height: int, timestamp: float, term: str, title: str) -> str:
    return json.dumps({"version": 2, "width": width, "height": height,
                       "timestamp": int(timestamp), "title": title,
                       "env": {"TERM": term, "SHELL": ""}}, separators=(", ", ": "))


def event(seconds: float, kind: str, text: str) -> str:
    return json.dumps([round(seconds, 6), kind, text], ensure_ascii=False)


def exec_record(record: dict[str, object]) -> str:
    """An exec session's record (no terminal, so no cast): one JSON object per file."""
    return json.dumps(record, ensure_ascii=False) + "\n"


class Cast:
    """The lines of one session's cast, each ending in a newline ("": nothing to write)."""

    def __init__(self, width: int, height: int, term: str, started: float, title: str,
                 record_input: bool) -> None:
        self.started = started
        self.record_input = record_input
        self.first = header(max(width, 1), max(height, 1), started, term, title) + "\n"
        self._out = codecs.getincrementaldecoder("utf-8")("replace")
        self._in = codecs.getincrementaldecoder("utf-8")("replace")

    def output(self, data: bytes, now: float) -> str:
        text = self._out.decode(data)
        return event(now - self.started, "o", text) + "\n" if text else ""

    def input(self, data: bytes, now: float) -> str:
        if not self.record_input:
            return ""
        text = self._in.decode(data)
        return event(now - self.started, "i", text) + "\n" if text else ""

    def resize(self, width: int, height: int, now: float) -> str:
        return event(now - self.started, "r", f"{width}x{height}") + "\n"
