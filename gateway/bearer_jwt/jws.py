"""Compact JWS (RFC 7515) as a bearer token, parsed strictly: exactly three segments of
canonical base64url without padding, a header and a payload that are JSON objects with
no name given twice, nothing JSON does not define (``NaN``), UTF-8 throughout.

Strictness is the point: two parsers that read one token differently (a duplicate
``alg`` or ``sub`` where one library takes the first and another the last, padding or
stray bits that one decoder drops) are how signature checks get bypassed. Pure; raises
``Malformed`` with a stable check name and a description that never quotes the token.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from gateway.wire.json_members import DuplicateMember, unique_members

# Stable check names (the WWW-Authenticate description, logs, tests and the CLI).
OVERSIZE = "oversize"
MALFORMED = "malformed"
DUPLICATE_KEY = "duplicate_key"

_B64URL = re.compile(r"[A-Za-z0-9_-]*")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # pairs are fine, lone ones are not


class Malformed(Exception):
    """The token is not one strict compact JWS; ``check`` names why."""

    def __init__(self, check: str, description: str) -> None:
        super().__init__(description)
        self.check = check
        self.description = description


@dataclass(frozen=True, slots=True)
class Parsed:
    header: dict[str, Any]
    payload: dict[str, Any]
    signing_input: bytes  # ``header.payload`` as sent: what the signature covers
    signature: bytes


def b64url_decode(segment: str, what: str) -> bytes:
    """Canonical unpadded base64url: only the 64 URL-safe characters, no ``=``, and no
    set bits past the last whole byte (a second spelling of the same bytes)."""
    if _B64URL.fullmatch(segment) is None or len(segment) % 4 == 1:
        raise Malformed(MALFORMED, f"the {what} is not base64url")
    try:
        data = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
    except (binascii.Error, ValueError):
        raise Malformed(MALFORMED, f"the {what} is not base64url") from None
    if base64.urlsafe_b64encode(data).rstrip(b"=") != segment.encode("ascii"):
        raise Malformed(MALFORMED, f"the {what} is not canonical base64url")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """``data`` as one JSON object; a name repeated at any depth is refused."""
    try:
        text = data.decode("utf-8")
        value = json.loads(text, object_pairs_hook=unique_members,
                           parse_constant=_no_constant)
    except DuplicateMember:
        raise Malformed(DUPLICATE_KEY, f"the {what} names a member twice") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Malformed(MALFORMED, f"the {what} is not JSON") from None
    if not isinstance(value, dict):
        raise Malformed(MALFORMED, f"the {what} is not a JSON object")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text):
        # ``"\ud800"`` parses into a string no header, log or assertion can encode
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise Malformed(MALFORMED, f"the {what} holds text that is not Unicode") from None
    return value


def parse(token: str, max_bytes: int) -> Parsed:
    """The three parts of a compact JWS (``Malformed`` otherwise)."""
    if len(token) > max_bytes:
        raise Malformed(OVERSIZE, f"the token is longer than {max_bytes} bytes")
    if not token.isascii():
        raise Malformed(MALFORMED, "the token is not ASCII")
    segments = token.split(".")
    if len(segments) == 5:
        raise Malformed(MALFORMED, "encrypted tokens (JWE) are not accepted")
    if len(segments) != 3:
        raise Malformed(MALFORMED, "the token is not three dot-separated segments")
    head, body, sig = segments
    # An empty signature parses (``alg: none`` tokens have one) so that the header's
    # check names the real problem; no accepted algorithm verifies an empty signature.
    if not head or not body:
        raise Malformed(MALFORMED, "the header or payload of the token is empty")
    header = json_object(b64url_decode(head, "header"), "header")
    payload = json_object(b64url_decode(body, "payload"), "payload")
    signature = b64url_decode(sig, "signature")
    return Parsed(header, payload, f"{head}.{body}".encode("ascii"), signature)
