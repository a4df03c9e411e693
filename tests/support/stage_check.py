"""The exchange's stage rules, held in every test that runs the data plane in process.

The data plane writes ``ExchangeBase.stage`` without asking whether ``stage.NEXT``
allows the move (the check would cost each request more than the moves do). The suite
checks every write instead: ``install`` puts a checking descriptor in front of the
slot, so a move the table does not list, a move made by any code but the exchange
method ``stage.MOVED_BY`` names for it, or a move to a final stage (``DONE``,
``TUNNEL``) made anywhere but ``ExchangeBase.enter`` itself (which keeps ``finished``
beside the stage), raises where it happens and fails the test that made it. The ``conftest``
fixture also reports them, in case a caller swallowed the exception.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gateway.dataplane.exchange.base import ExchangeBase
from gateway.dataplane.exchange.stage import FINAL, MOVED_BY, NEXT, Stage


class IllegalMove(AssertionError):
    """An exchange made a move ``stage.NEXT`` does not list (or ended outside
    ``enter``)."""


# the slot's own descriptor, kept from before ``install`` replaced it
_SLOT: Any = ExchangeBase.__dict__["stage"]
_ENTER_CODE = ExchangeBase.enter.__code__
# the exchange's own modules: the only ones whose methods may write the stage
_EXCHANGE_DIR = str(Path(_ENTER_CODE.co_filename).parent)
# illegal moves, as (old, new) names, since the last ``take``
_illegal: list[tuple[str, str]] = []


class _CheckedStage:
    def __get__(self, exchange: ExchangeBase | None, owner: type | None = None) -> Any:
        if exchange is None:
            return self
        return _SLOT.__get__(exchange, owner)

    def __set__(self, exchange: ExchangeBase, stage: Stage) -> None:
        try:
            old: Stage | None = _SLOT.__get__(exchange, type(exchange))
        except AttributeError:
            old = None  # ``__init__`` sets the first stage
        if old is not None:
            problem = ""
            writer = sys._getframe(1).f_code
            if stage not in NEXT[old]:
                problem = "which stage.NEXT does not list"
            elif stage >= FINAL and writer is not _ENTER_CODE:
                problem = "outside ExchangeBase.enter, which keeps `finished` beside it"
            elif writer.co_name not in MOVED_BY[stage] \
                    or str(Path(writer.co_filename).parent) != _EXCHANGE_DIR:
                problem = (f"in {writer.co_name} ({Path(writer.co_filename).name}), not in "
                           f"the exchange method stage.MOVED_BY names for it")
            if problem:
                _illegal.append((old.name, stage.name))
                raise IllegalMove(f"an exchange moved from {old.name} to {stage.name}, "
                                  + problem)
        _SLOT.__set__(exchange, stage)


def install() -> None:
    ExchangeBase.stage = _CheckedStage()  # type: ignore[assignment]


def take() -> list[tuple[str, str]]:
    """The illegal moves made since the last call."""
    moves = list(_illegal)
    _illegal.clear()
    return moves
