"""Fuzz target: an MCP server's answer to a list call, as an event stream
(``gateway.mcp.sse``) and as a JSON body (``gateway.mcp.listing``), filtered.

Input: one byte choosing where the stream is cut (and whether the request was a batch),
then the server's bytes.

Contract:

- the reader gives the same blocks, and the same unfinished rest, whatever the pieces;
  read in one piece, the blocks' raw bytes and the rest are the input;
- neither the reader nor the filter raises (beyond ``EventTooLarge`` past the bound);
- what the filter lets out is JSON, and no list in it holds an entry the caller may not
  use (entries are allowed only when their name or URI starts with ``ok``), whatever id,
  shape or duplicate members the server wrote, with list calls pending or none; what
  the filter passed on as it came holds no list result for any reader (JSON without
  one, or text ``could_hold_list`` clears: no ``\\u`` escape, and no ``result`` with a
  list call pending, no list member's name without).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway"):
    from gateway.mcp.listing import (
        LISTS,
        Counts,
        could_hold_list,
        filter_data,
        filter_json,
        list_calls,
    )
    from gateway.mcp.messages import McpCall, McpRequest
    from gateway.mcp.sse import EventTooLarge, SseReader

BOUND = 8192
REQUEST = McpRequest((McpCall(1, "tools/list"), McpCall("p", "prompts/list"),
                      McpCall(2, "resources/templates/list")))
PENDING = list_calls(REQUEST)
MEMBERS = {shape.member: shape.key for shape in LISTS.values()}


def allowed(method: str, name: str) -> bool:
    return name.startswith("ok")


def check_out(text: str | bytes) -> None:
    """What goes to the client: JSON whose lists hold only allowed entries."""
    message = json.loads(text)
    for item in message if isinstance(message, list) else [message]:
        if not isinstance(item, dict):
            continue
        result = item.get("result")
        if not isinstance(result, dict):
            continue
        for member, key in MEMBERS.items():
            if member in result:
                entries = result[member]
                assert isinstance(entries, list), describe(text)
                for entry in entries:
                    assert allowed("", entry[key]), describe(text)


def untouched(data: str | bytes, pending: bool) -> None:
    """What the filter passed on as it came: no list result can be in it (it is JSON
    whose results hold no list, or text that names none and has no ``\\u`` escape)."""
    try:
        message = json.loads(data)
    except ValueError:
        # (text no reader finds a list result in: no escape, and no "result" name with a
        # list call pending, no list member's name without)
        assert not could_hold_list(data, pending), describe(data)
        return
    for item in message if isinstance(message, list) else [message]:
        if isinstance(item, dict) and isinstance(item.get("result"), dict):
            assert not set(item["result"]) & set(MEMBERS), describe(data)


def read(pieces: list[bytes]) -> tuple[list[Any], bytes]:
    reader = SseReader(BOUND)
    blocks = []
    for piece in pieces:
        blocks.extend(reader.feed(piece))
    return blocks, reader.close()


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    cut, stream = data[0], data[1:]
    at = cut % (len(stream) + 1)
    try:
        whole, rest = read([stream])
        split, split_rest = read([stream[:at], stream[at:]])
    except EventTooLarge:
        return
    assert [b.fields for b in whole] == [b.fields for b in split], describe(stream)
    assert rest == split_rest, describe(stream)
    assert b"".join(b.raw for b in whole) + rest == stream, describe(stream)
    for pending in (PENDING, {}):
        for block in whole:
            text = block.data
            if text is None:
                continue
            out = filter_data(text, pending, allowed, Counts.empty())
            if out is None:
                if text.strip():
                    untouched(text, bool(pending))
            else:
                check_out(out)
                assert block.with_data(out).endswith(b"\n\n")
        request = McpRequest(REQUEST.calls if pending else (), batch=bool(cut & 1))
        body = filter_json(stream, request, pending, allowed, Counts.empty())
        if body is stream:
            untouched(stream, bool(pending))
        else:
            check_out(body)


if __name__ == "__main__":
    fuzz(TestOneInput)
