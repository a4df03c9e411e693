"""Standard input and output as a Twisted transport, past ``StandardIO``'s public face.

- ``PosixStandardIO``: the POSIX class itself. ``twisted.internet.stdio.StandardIO`` is
  that class on POSIX, but the type stubs name the Windows one, which takes no
  ``stdout`` descriptor (the worker replies on its own descriptor, not on 1).
- ``writer_gone``: whether its stdout side is already closed. ``loseConnection`` ends
  the transport only when the writer finishes, so a caller must know when it never will.
"""

from __future__ import annotations

from typing import Any

from twisted.internet._posixstdio import StandardIO as PosixStandardIO

RELIES_ON = (
    ("twisted.internet._posixstdio", "", ("StandardIO",)),
)
RELIES_ON_INSTANCE = (
    ("twisted.internet._posixstdio", "StandardIO", ("_writer",)),
)

__all__ = ["PosixStandardIO", "writer_gone"]


def writer_gone(stdio: Any) -> bool:
    """Whether ``stdio``'s standard output has been closed (its writer dropped)."""
    return getattr(stdio, "_writer", None) is None
