"""Session recordings as asciicast v2 (what ``asciinema play`` reads): a header line,
then one JSON array per event, ``[seconds, "o"|"i"|"r", text]``. Files are created
0600 and never overwritten; text is decoded incrementally, so a UTF-8 character split
across two reads is written once, whole."""

from __future__ import annotations

import codecs
import json
import os
from typing import IO


def header(width: int, height: int, timestamp: float, term: str, title: str) -> str:
    return json.dumps({"version": 2, "width": width, "height": height,
                       "timestamp": int(timestamp), "title": title,
                       "env": {"TERM": term, "SHELL": ""}}, separators=(", ", ": "))


def event(seconds: float, kind: str, text: str) -> str:
    return json.dumps([round(seconds, 6), kind, text], ensure_ascii=False)


def write_exec_record(path: str, record: dict[str, object]) -> None:
    """An exec session's record (no terminal, so no cast): one JSON object, 0600."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")


class Recording:
    def __init__(self, path: str, width: int, height: int, term: str, started: float,
                 title: str, record_input: bool) -> None:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        self.path = path
        self.file: IO[str] | None = os.fdopen(fd, "w", encoding="utf-8")
        self.started = started
        self.record_input = record_input
        self._out = codecs.getincrementaldecoder("utf-8")("replace")
        self._in = codecs.getincrementaldecoder("utf-8")("replace")
        self._write(header(max(width, 1), max(height, 1), started, term, title))

    def _write(self, line: str) -> None:
        if self.file is not None:
            self.file.write(line + "\n")

    def output(self, data: bytes, now: float) -> None:
        text = self._out.decode(data)
        if text:
            self._write(event(now - self.started, "o", text))

    def input(self, data: bytes, now: float) -> None:
        if self.record_input:
            text = self._in.decode(data)
            if text:
                self._write(event(now - self.started, "i", text))

    def resize(self, width: int, height: int, now: float) -> None:
        self._write(event(now - self.started, "r", f"{width}x{height}"))

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None
