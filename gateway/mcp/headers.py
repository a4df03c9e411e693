"""The HTTP headers of a request to an MCP route: ``Origin``, and the request metadata
headers of the Streamable HTTP transport (``MCP-Protocol-Version``, and from
2026-07-28 ``Mcp-Method`` and ``Mcp-Name``) against the body they mirror.

The rules, from the transport texts (2025-06-18, 2025-11-25, 2026-07-28), and where
they leave a choice the stricter one:

- ``Origin`` present and not the route's own origin (scheme, host and port as the
  client reached the gateway; ``null`` included): 403 with a JSON-RPC error without an
  id ("servers MUST validate the Origin header ... MUST respond with HTTP 403").
- Each of the three headers at most once, its value visible ASCII (a ``Mcp-Name``
  outside that is sent as ``=?base64?...?=``, decoded here before it is compared);
  ``MCP-Protocol-Version`` a token such as ``2025-11-25``. Otherwise 400 ``-32020``.
- Where ``Mcp-Method`` / ``Mcp-Name`` are present they must equal the body's method
  and name (``params.name`` of ``tools/call`` and ``prompts/get``, ``params.uri`` of
  ``resources/read``), for every message of the body, whatever the version: 400
  ``-32020`` otherwise. A ``Mcp-Name`` on a method that has no such name disagrees.
- From 2026-07-28 (and for a version that is not a date, which can only be newer)
  they are required: ``Mcp-Method`` on every request, ``Mcp-Name`` on those three
  methods; the header version must equal ``params._meta``'s
  ``io.modelcontextprotocol/protocolVersion``, and a body carrying a version that
  requires the headers without ``MCP-Protocol-Version`` disagrees too.
- ``Mcp-Param-*`` headers mirror tool arguments the server chose; the gateway does not
  know the tools' schemas, so it forwards them unread and never decides on them, as
  the text asks of an intermediary that does not recognise them.

Policy is never decided from the headers alone: the gateway always reads the body,
and the headers only have to agree with it.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.mcp.errors import HEADER_MISMATCH, Refusal, bad_origin
from gateway.mcp.messages import McpCall, McpRequest

MCP_METHOD = b"mcp-method"
MCP_NAME = b"mcp-name"
PROTOCOL_VERSION = b"mcp-protocol-version"
ORIGIN = b"origin"
HEADERS_REQUIRED_FROM = "2026-07-28"
# the methods whose name ``Mcp-Name`` mirrors (2026-07-28, "Standard Request Headers")
NAME_HEADER_METHODS = frozenset({"tools/call", "resources/read", "prompts/get"})

_VISIBLE = re.compile(rb"[\t\x20-\x7e]*")
_VERSION = re.compile(rb"[A-Za-z0-9._-]{1,64}")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ENCODED = re.compile(rb"=\?base64\?(.*)\?=", re.DOTALL)
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class McpHeaders:
    """The metadata headers a request carried: ``None`` (or ``""`` for the version)
    when absent; ``name`` decoded."""

    method: str | None = None
    name: str | None = None
    protocol_version: str = ""


def read_headers(headers: list[tuple[bytes, bytes]]) -> McpHeaders | Refusal:
    """The request's metadata headers, or the 400 ``-32020`` refusing them."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        low = name.lower()
        if low in (MCP_METHOD, MCP_NAME, PROTOCOL_VERSION):
            if low in found:
                return _mismatch(f"the header {name.decode('latin-1')} is repeated")
            value = value.strip(b" \t")
            if not _VISIBLE.fullmatch(value):
                return _mismatch(f"the header {name.decode('latin-1')} holds characters "
                                 "a header value may not")
            found[low] = value
    version = found.get(PROTOCOL_VERSION, b"")
    if version and not _VERSION.fullmatch(version):
        return _mismatch(f"MCP-Protocol-Version {version.decode('latin-1')!r} is not a "
                         "protocol version")
    method = found.get(MCP_METHOD)
    raw_name = found.get(MCP_NAME)
    decoded: str | None = None
    if raw_name is not None:
        decoded = _decoded(raw_name)
        if decoded is None:
            return _mismatch("the header Mcp-Name is not valid =?base64?...?= encoding")
    return McpHeaders(method.decode("ascii") if method is not None else None, decoded,
                      version.decode("ascii"))


def _decoded(value: bytes) -> str | None:
    """A ``Mcp-Name`` value as text: the base64 sentinel decoded (strict base64, then
    UTF-8), a plain value as it is."""
    encoded = _ENCODED.fullmatch(value)
    if encoded is None:
        return value.decode("ascii")
    try:
        return base64.b64decode(encoded.group(1), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def requires_headers(version: str) -> bool:
    """Whether ``version`` is one that requires ``Mcp-Method`` / ``Mcp-Name``: 2026-07-28
    and later, and any version that is not a date (none before it was)."""
    if not version:
        return False
    return not _DATE.fullmatch(version) or version >= HEADERS_REQUIRED_FROM


def check_agreement(found: McpHeaders, request: McpRequest) -> Refusal | None:
    """The 400 ``-32020`` when the headers disagree with the body's messages, or lack
    what their version requires; ``None`` when they agree."""
    version = found.protocol_version
    required = requires_headers(version)
    for call in request.calls:
        problem = _disagreement(found, call, version, required)
        if problem is not None:
            return _mismatch(problem, call.id if not request.batch else None)
    return None


def _disagreement(found: McpHeaders, call: McpCall, version: str, required: bool
                  ) -> str | None:
    if call.protocol_version:
        if not version and requires_headers(call.protocol_version):
            return (f"the body is of protocol version {call.protocol_version}, which "
                    "requires the MCP-Protocol-Version header")
        if version and call.protocol_version != version:
            return (f"MCP-Protocol-Version header value {version!r} does not match the "
                    f"body's protocol version {call.protocol_version!r}")
    if found.method is None:
        if required and call.answered:
            return f"protocol version {version} requires the Mcp-Method header"
    elif found.method != call.method:
        return (f"Mcp-Method header value {found.method!r} does not match body value "
                f"{call.method!r}")
    named = call.method in NAME_HEADER_METHODS
    if found.name is None:
        if required and named and call.answered:
            return f"protocol version {version} requires the Mcp-Name header for {call.method}"
    elif not named:
        return f"Mcp-Name header present, but {call.method or 'the body'} names nothing"
    elif found.name != call.name:
        return (f"Mcp-Name header value {found.name!r} does not match body value "
                f"{call.name!r}")
    return None


def _mismatch(message: str, id_: str | int | None = None) -> Refusal:
    return Refusal(400, HEADER_MISMATCH, f"Header mismatch: {message}", id_)


def origin_refusal(headers: list[tuple[bytes, bytes]], scheme: str, host: str
                   ) -> Refusal | None:
    """403 when ``Origin`` is present and not ``scheme://host`` (the route's origin as
    the client reached it; default ports equal to none), or repeated."""
    origins = [value for name, value in headers if name.lower() == ORIGIN]
    if not origins:
        return None
    text = origins[0].strip().decode("latin-1")
    if len(origins) > 1 or not same_origin(text, scheme, host):
        return bad_origin(text)
    return None


def same_origin(origin: str, scheme: str, host: str) -> bool:
    """Whether the serialised ``origin`` is ``scheme://host``."""
    try:
        theirs = urlsplit(origin)
        their_port = theirs.port
        ours = urlsplit(f"{scheme}://{host}")
        our_port = ours.port
    except ValueError:
        return False
    if theirs.path or theirs.query or theirs.fragment or theirs.username is not None \
            or theirs.password is not None or not theirs.hostname:
        return False
    their_scheme = theirs.scheme.lower()
    default = _DEFAULT_PORTS.get(scheme.lower())
    return (their_scheme == scheme.lower()
            and theirs.hostname.rstrip(".") == (ours.hostname or "").rstrip(".")
            and (their_port or _DEFAULT_PORTS.get(their_scheme)) == (our_port or default))
