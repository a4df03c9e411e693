"""Single use for short-lived sealed values (the session hand-off at the end of
sign-in): a value is accepted once, then remembered until it expires anyway.

The hand-off travels in a URL, which ends up in browser history and in the access logs
of every proxy on the way (nginx, caddy); remembering it makes a copy worthless once the
browser has used it. The memory is per process and bounded: when it is full, the
values closest to their expiry are forgotten first.
"""

from __future__ import annotations

import heapq

MAX_REMEMBERED = 100_000


class SpentTokens:
    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self.limit = limit
        self._spent: dict[str, float] = {}
        self._expiry: list[tuple[float, str]] = []  # heap, soonest first

    def spend(self, token_id: str, expires_at: float, now: float) -> bool:
        """True the first time ``token_id`` is spent, False on every later try."""
        self._forget_expired(now)
        if token_id in self._spent:
            return False
        while len(self._spent) >= self.limit and self._expiry:
            _, oldest = heapq.heappop(self._expiry)
            self._spent.pop(oldest, None)
        self._spent[token_id] = expires_at
        heapq.heappush(self._expiry, (expires_at, token_id))
        return True

    def _forget_expired(self, now: float) -> None:
        while self._expiry and self._expiry[0][0] <= now:
            _, token_id = heapq.heappop(self._expiry)
            self._spent.pop(token_id, None)

    def __len__(self) -> int:
        return len(self._spent)
