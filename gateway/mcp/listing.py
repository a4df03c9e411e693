"""List results filtered to what the caller's policy allows (no I/O).

An agent should never see a tool it may not call: the result of a ``tools/list`` keeps
the tools the caller may ``tools/call`` by name, a ``prompts/list`` the prompts it may
``prompts/get``, a ``resources/list`` the resources it may ``resources/read`` by URI.
A ``resources/templates/list`` keeps a template when the caller may ``resources/read``
a resource whose URI is the template's text (``uriTemplate``): the safe reading of a
template, since a policy that looks at resource URIs at all (a prefix, an exact list)
then shows only templates it would let through as they are written, and each concrete
URI is still decided on its own when read. ``allowed(method, name)`` is the decision
(``gateway.authorize.mcp_entries`` makes it from the caller and the route's policy).

Everything else is left as it is: ``nextCursor``, ``_meta`` and any other member of the
result, errors, notifications, requests from the server, responses to other calls.

Which responses are filtered: one whose ``id`` is that of a list call of the request
(``pending``, from ``list_calls``), and also any response whose ``result`` carries one of
the list members (``tools``, ``prompts``, ``resources``, ``resourceTemplates``) whatever
its id says. Clients match ids their own way (the TypeScript SDK compares
``Number(id)``, so a response id ``"1"`` or ``1.0`` answers the request ``1``), and a
resumed stream (a GET with ``Last-Event-ID``) replays responses to calls of an earlier
request; no other result of the protocol has such a member at its top.

Fail closed: a list result that is not what the specification says (no list, an entry
that is not an object, a name or URI that is not a string, a duplicate member in a
message), and a body that is not JSON at all, never reach the client unfiltered: the
message becomes a JSON-RPC error (``-32603``, ``LIST_UNREADABLE``) for its id, and a
body that cannot be read at all becomes one such error per call of the request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.mcp.errors import error_object
from gateway.mcp.messages import McpRequest, RequestId
from gateway.wire.json_members import DuplicateMember, unique_members

Allowed = Callable[[str, str], bool]
"""``allowed(method, name)``: whether the caller may make the call ``method`` about
``name`` (a tool's or prompt's name, a resource's URI)."""

LIST_UNREADABLE = -32603  # JSON-RPC "internal error": the gateway could not filter


@dataclass(frozen=True, slots=True)
class ListShape:
    """What a list method's result holds: the member with the entries, the member of an
    entry that names it, and the call that would use the entry."""

    member: str
    key: str
    call: str


LISTS: dict[str, ListShape] = {
    "tools/list": ListShape("tools", "name", "tools/call"),
    "prompts/list": ListShape("prompts", "name", "prompts/get"),
    "resources/list": ListShape("resources", "uri", "resources/read"),
    "resources/templates/list": ListShape("resourceTemplates", "uriTemplate",
                                          "resources/read"),
}
_BY_MEMBER = {shape.member: method for method, shape in LISTS.items()}

IdKey = tuple[str, str | int]


def id_key(value: object) -> IdKey | None:
    """A JSON-RPC id as a key: strings and integers (an integral float is the integer
    it equals); ``None`` for anything else (null, booleans, objects)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, int):
        return ("n", value)
    if isinstance(value, float) and value.is_integer():
        return ("n", int(value))
    return None


def list_calls(request: McpRequest) -> dict[IdKey, str]:
    """The request's list calls, by id: the responses to filter."""
    out: dict[IdKey, str] = {}
    for call in request.calls:
        key = id_key(call.id)
        if key is not None and call.method in LISTS:
            out[key] = call.method
    return out


class Unreadable(ValueError):
    """A list result the gateway cannot filter (so the client does not get it)."""


@dataclass(slots=True)
class Counts:
    """What a filter did, for the metrics: entries shown and hidden per list method,
    and the list results refused as unreadable."""

    shown: dict[str, int]
    hidden: dict[str, int]
    refused: dict[str, int]

    @classmethod
    def empty(cls) -> Counts:
        return cls({}, {}, {})


def parse(text: str | bytes) -> Any:
    """JSON with duplicate members refused (``Unreadable``), as the request side reads."""
    try:
        return json.loads(text, object_pairs_hook=unique_members)
    except DuplicateMember as exc:  # two readers may keep different copies: refused
        raise Unreadable(str(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise Unreadable(f"not JSON: {exc}") from None


def error_for(id_value: RequestId, method: str, why: str) -> dict[str, object]:
    """The JSON-RPC error a list result the gateway could not filter is replaced by."""
    return error_object(id_value, LIST_UNREADABLE,
                        f"the gateway could not filter the server's {method} result "
                        f"({why}); it was not passed on")


def _list_method(message: dict[str, Any], pending: Mapping[IdKey, str]) -> str | None:
    """The list method ``message`` answers, if it is a result to filter. (Any message
    with a ``result``: one that also has a ``method`` is no valid message, and a client
    may still read it as a response.)"""
    if "result" not in message:
        return None
    key = id_key(message.get("id"))
    method = pending.get(key) if key is not None else None
    if method is not None:
        return method
    result = message["result"]
    if isinstance(result, dict):
        for member, listed in _BY_MEMBER.items():
            if member in result:
                return listed
    return None


def _filtered(result: Any, method: str, allowed: Allowed, counts: Counts) -> dict[str, Any]:
    shape = LISTS[method]
    if not isinstance(result, dict):
        raise Unreadable("the result is not an object")
    entries = result.get(shape.member)
    if not isinstance(entries, list):
        raise Unreadable(f"no {shape.member} list")
    kept = []
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get(shape.key), str):
            raise Unreadable(f"an entry without a {shape.key} string")
        if allowed(shape.call, entry[shape.key]):
            kept.append(entry)
    out = dict(result)
    out[shape.member] = kept
    counts.shown[method] = counts.shown.get(method, 0) + len(kept)
    counts.hidden[method] = counts.hidden.get(method, 0) + len(entries) - len(kept)
    # (another list member beside it, e.g. a result with both tools and prompts, is
    # filtered by its own rule: nothing listed goes out undecided)
    for member, other in _BY_MEMBER.items():
        if other != method and member in result:
            out = {**out, **_filtered({member: result[member]}, other, allowed, counts)}
    return out


def filter_message(message: Any, pending: Mapping[IdKey, str], allowed: Allowed,
                   counts: Counts) -> tuple[Any, bool]:
    """``message`` (one parsed JSON-RPC message, or a batch) with its list results
    filtered, and whether it holds one (then it must be written anew, never passed on
    as the server wrote it)."""
    if isinstance(message, list):
        out, touched = [], False
        for item in message:
            new, hit = filter_message(item, pending, allowed, counts)
            out.append(new)
            touched = touched or hit
        return out, touched
    if not isinstance(message, dict):
        return message, False
    method = _list_method(message, pending)
    if method is None:
        return message, False
    try:
        result = _filtered(message["result"], method, allowed, counts)
    except Unreadable as exc:
        counts.refused[method] = counts.refused.get(method, 0) + 1
        return error_for(message.get("id"), method, str(exc)), True
    return {**message, "result": result}, True


def encode(message: Any) -> str:
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def refusal(request: McpRequest, why: str) -> bytes:
    """The body that replaces one the gateway could not read: an error per call of the
    request that awaits an answer (a batch's as an array)."""
    errors = [error_for(call.id, call.method if call.method in LISTS else "list", why)
              for call in request.calls if call.id is not None]
    if not errors:
        errors = [error_for(None, "list", why)]
    body: Any = errors if request.batch else errors[0]
    return encode(body).encode()


def filter_json(body: bytes, request: McpRequest, pending: Mapping[IdKey, str],
                allowed: Allowed, counts: Counts) -> bytes:
    """An ``application/json`` response body, filtered (the same bytes when it holds no
    list result; written anew when it does). The answer to a request without a list call
    is parsed only when it could hold a list for some reader (``could_hold_list``): most
    tool results go on unparsed, whatever they are."""
    if not pending and not could_hold_list(body, False):
        return body  # (the answer to a list call is always read: it must be the list)
    try:
        message = parse(body)
    except Unreadable as exc:
        for method in set(pending.values()):
            counts.refused[method] = counts.refused.get(method, 0) + 1
        return refusal(request, str(exc))
    out, touched = filter_message(message, pending, allowed, counts)
    return encode(out).encode() if touched else body


_MEMBERS = tuple(_BY_MEMBER)
_MEMBER_BYTES = tuple(member.encode() for member in _MEMBERS)


def could_hold_list(text: str | bytes, pending: bool) -> bool:
    """Whether ``text`` (a JSON body or an event's data) could hold a list result for any
    reader, so must be parsed. A member name cannot hide behind an escape other than
    ``\\u`` (JSON spells no letter otherwise), so without one: with list calls pending,
    their answers need the name ``result`` (to be checked, even malformed); without, a
    list result anywhere needs a list member's name (``tools``...). The rest (a
    notification, most tool results) goes on unparsed: it holds no list for anyone."""
    if isinstance(text, bytes):
        # (a NUL: UTF-16 or UTF-32, which Python's json reads, spelling names apart)
        if b"\\u" in text or b"\\U" in text or b"\x00" in text:
            return True
        if pending:
            return b"result" in text
        return any(member in text for member in _MEMBER_BYTES)
    if "\\u" in text or "\\U" in text:
        return True
    if pending:
        return "result" in text
    return any(member in text for member in _MEMBERS)


def filter_data(data: str, pending: Mapping[IdKey, str], allowed: Allowed,
                counts: Counts) -> str | None:
    """An SSE event's data (one JSON-RPC message or a batch), filtered: ``None`` when it
    holds no list result (the event goes on as it came). Data that is not JSON is
    replaced by an error for an unknown id: it might have been a list (data that cannot
    hold one, ``could_hold_list``, goes on unparsed: an empty keep-alive, a
    notification)."""
    if not data.strip() or not could_hold_list(data, bool(pending)):
        return None
    try:
        message = parse(data)
    except Unreadable as exc:
        counts.refused["unknown"] = counts.refused.get("unknown", 0) + 1
        return encode(error_for(None, "list", str(exc)))
    out, touched = filter_message(message, pending, allowed, counts)
    return encode(out) if touched else None
