"""The exchange's stage rules, held in every test that runs the data plane in process.

``ExchangeBase.enter`` moves an exchange without asking whether ``stage.NEXT`` allows
the move (the check would cost each request more than the moves do). The suite wraps it
instead: ``install`` makes every move check the table, and a move the table does not
list fails the test that made it (raised where it happens, and reported by the
``conftest`` fixture in case a caller swallowed the exception).
"""

from __future__ import annotations

from gateway.dataplane.exchange.base import ExchangeBase
from gateway.dataplane.exchange.stage import NEXT, Stage


class IllegalMove(AssertionError):
    """An exchange made a move ``stage.NEXT`` does not list."""


# moves the table does not list, as (old, new) names, since the last ``take``
_illegal: list[tuple[str, str]] = []
_plain_enter = ExchangeBase.enter


def _checked_enter(self: ExchangeBase, stage: Stage) -> None:
    old = self.stage
    if stage not in NEXT[old]:
        _illegal.append((old.name, stage.name))
        raise IllegalMove(f"an exchange moved from {old.name} to {stage.name}, "
                          "which stage.NEXT does not list")
    _plain_enter(self, stage)


def install() -> None:
    ExchangeBase.enter = _checked_enter  # type: ignore[method-assign]


def take() -> list[tuple[str, str]]:
    """The illegal moves made since the last call."""
    moves = list(_illegal)
    _illegal.clear()
    return moves
