"""The pipe between the supervisor and a worker: netstrings holding JSON objects.

The supervisor writes on the worker's descriptor 0 and reads its descriptor
``REPLY_FD``; descriptors 1 and 2 stay the shared log stream. Messages:

- supervisor → worker: ``{"op": "reload", "reason": R, "config": base64 of the file}``,
  ``{"op": "metrics", "id": N}``
- worker → supervisor: ``{"op": "ready"}``, ``{"op": "metrics", "id": N, "text": T}``,
  ``{"op": "reloaded", "ok": bool, "checksum": C}``
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from twisted.protocols.basic import NetstringReceiver

REPLY_FD = 3
# Listening descriptors start here in a worker (the main listener, then the redirect one).
FIRST_LISTEN_FD = 4
# A metrics exposition of a busy worker: many routes x hosts x statuses x buckets.
MAX_MESSAGE = 64 * 1024 * 1024

Message = dict[str, Any]


def encode(message: Message) -> bytes:
    """One message as a netstring."""
    data = json.dumps(message, separators=(",", ":")).encode()
    return b"%d:%s," % (len(data), data)


def decode(data: bytes) -> Message:
    """The JSON object of one netstring's payload; ``ValueError`` if it is none."""
    message = json.loads(data)
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise ValueError("a control message is a JSON object with an 'op'")
    return message


class ControlReceiver(NetstringReceiver):
    """Hands each decoded message to ``handle``; a malformed one closes the pipe (only
    our own processes write to it: a bad message is a bug, not input to tolerate)."""

    MAX_LENGTH = MAX_MESSAGE

    def __init__(self, handle: Callable[[Message], None]) -> None:
        self.handle = handle

    def stringReceived(self, string: bytes) -> None:
        try:
            message = decode(string)
        except ValueError:
            if self.transport is not None:
                self.transport.loseConnection()
            return
        self.handle(message)

    def send(self, message: Message) -> None:
        if self.transport is not None:
            self.transport.write(encode(message))
