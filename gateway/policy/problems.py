"""Where the policy parser reports what is wrong: the shape it needs of a problem sink.

The policy package imports nothing of the gateway, so it names the sink structurally;
``gateway.config.errors.Problems`` (which gathers every mistake of a configuration file)
is the one passed in.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Protocol


class Problems(Protocol):
    """Collects errors at key paths (``policy[2].from``); the parser reads their count to
    tell whether a part it parsed was sound."""

    @property
    def errors(self) -> Sequence[object]: ...

    def error(self, path: str, message: str) -> None: ...


def did_you_mean(key: object, known: Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest of ``known``, or nothing. ``key`` may be
    any YAML key (``1:``, ``null:``), not only a string."""
    close = difflib.get_close_matches(str(key), list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
