"""``Mcp-Session-Id`` bound to the person, without state: the gateway hands the client
the server's session id with a MAC over who it was given to, and takes it back only
from them.

The server's ``Mcp-Session-Id: X`` (2025-03-26 to 2025-11-25; 2026-07-28 has no sessions)
goes to the client as ``X.T``: ``T`` the first 128 bits of HMAC-SHA256, base64url,
over the identity provider, the user id, the route and ``X`` (each length-prefixed),
under a key derived from ``shared_secret`` (HKDF, as the databroker's record key is).
A request carrying ``X.T`` is forwarded with ``X`` only when ``T`` verifies for its
caller on its route; any other value is refused as an unknown session (404, as the
transport asks), so someone who learns another person's session id cannot attach to
that session's stream or replay its events with ``Last-Event-ID``. Every worker and
split-mode process with the same ``shared_secret`` agrees, with nothing stored.

The transport allows only visible ASCII (0x21 to 0x7E) in a session id: ``.`` and
base64url's alphabet keep ``X.T`` within it whenever ``X`` is.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

HEADER = b"mcp-session-id"
_TAG_BYTES = 16
_TAG_CHARS = 22  # base64url of 16 bytes, unpadded


class SessionIds:
    """The binding of one route's session ids (built once per configuration)."""

    __slots__ = ("_key", "_route")

    def __init__(self, shared_secret: bytes, route: str) -> None:
        self._key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                         info=b"gateway mcp session ids").derive(shared_secret)
        self._route = route.encode("utf-8")

    def _tag(self, server_id: bytes, provider: str, user_id: str) -> bytes:
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (provider.encode("utf-8"), user_id.encode("utf-8"), self._route,
                     server_id):
            mac.update(len(part).to_bytes(4, "big"))
            mac.update(part)
        return base64.urlsafe_b64encode(mac.digest()[:_TAG_BYTES]).rstrip(b"=")

    def bind(self, server_id: bytes, provider: str, user_id: str) -> bytes:
        """What the client gets for the server's ``server_id``."""
        return server_id + b"." + self._tag(server_id, provider, user_id)

    def unbind(self, value: bytes, provider: str, user_id: str) -> bytes | None:
        """The server's id in ``value`` when it was bound for this caller on this
        route, else ``None``."""
        server_id, dot, tag = value.rpartition(b".")
        if not dot or len(tag) != _TAG_CHARS:
            return None
        if not hmac.compare_digest(tag, self._tag(server_id, provider, user_id)):
            return None
        return server_id
