"""Opening a tunnel for one local connection, signing in when the gateway asks for it.

    cached token (or none) -> CONNECT
        200                      -> the tunnel
        401 or 3xx               -> forget the token, sign in, CONNECT once more
            200                  -> the tunnel (the first connection after a sign-in works)
            401 or 3xx again     -> error: the new token was refused too (and is forgotten)
        anything else            -> error naming the cause

Local connections that need a sign-in while one is under way wait for that one instead
of opening a second browser tab; one that was refused with a token older than the
current one simply retries with the current one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure

from gateway.cli.tcp import messages
from gateway.cli.tcp.options import Address, GatewayURL
from gateway.cli.tcp.wire import Refused

T = TypeVar("T")


class Cache(Protocol):
    """What the opener needs of ``token_cache.TokenCache``."""

    @property
    def path(self) -> object: ...

    def load(self) -> str | None: ...
    def store(self, token: str) -> None: ...
    def forget(self, token: str) -> bool: ...


class TunnelOpener(Generic[T]):
    """Opens tunnels (``T``: an established gateway connection) for one destination."""

    def __init__(self, destination: Address, gateway: GatewayURL,
                 dial: Callable[[str | None], Awaitable[T | Refused]],
                 sign_in: Callable[[], Awaitable[str]], cache: Cache,
                 warn: Callable[[str], None]) -> None:
        self.destination = destination
        self.gateway = gateway
        self.dial = dial
        self.sign_in = sign_in
        self.cache = cache
        self.warn = warn
        self.token: str | None = None  # the newest token this process knows
        self.sign_ins = 0
        self._waiting: list[Deferred[str]] | None = None  # set while a sign-in runs

    async def open(self) -> T:
        token = self.token or self.cache.load()
        answer = await self.dial(token)
        if not isinstance(answer, Refused):
            self.token = token
            return answer
        if not messages.needs_sign_in(answer.status):
            raise messages.TunnelError(self._explain(answer))
        if token is not None:
            self._drop(token)
        token = await self._fresh_token(stale=token)
        answer = await self.dial(token)
        if not isinstance(answer, Refused):
            return answer
        if messages.needs_sign_in(answer.status):
            self._drop(token)
        raise messages.TunnelError(self._explain(answer))

    def _explain(self, refusal: Refused) -> str:
        return messages.refused(refusal.status, refusal.detail, self.destination, self.gateway,
                                str(self.cache.path))

    def _drop(self, token: str) -> None:
        """The gateway refused ``token`` (expired, signed out): never send it again."""
        if self.token == token:
            self.token = None
        self.cache.forget(token)

    def _fresh_token(self, stale: str | None) -> Deferred[str]:
        """A token newer than ``stale``: the current one (this process's or the cache's),
        or the result of the sign-in under way, or of a new one."""
        if self.token is not None and self.token != stale:
            return succeed(self.token)
        cached = self.cache.load()  # another gateway tcp may have signed in meanwhile
        if cached is not None and cached != stale:
            self.token = cached
            return succeed(cached)
        waiter: Deferred[str] = Deferred()
        if self._waiting is not None:
            self._waiting.append(waiter)
            return waiter
        self._waiting = [waiter]
        self.sign_ins += 1
        Deferred.fromCoroutine(self._run_sign_in()).addBoth(self._signed_in)
        return waiter

    async def _run_sign_in(self) -> str:
        return await self.sign_in()

    def _signed_in(self, result: str | Failure) -> None:
        waiting, self._waiting = self._waiting or [], None
        if isinstance(result, str):
            self.token = result
            try:
                self.cache.store(result)
            except OSError as exc:
                self.warn(f"cannot save the token in {self.cache.path} ({exc}); the next "
                          "run will ask to sign in again")
        for waiter in waiting:
            if waiter.called:
                continue  # cancelled: its local connection went away
            if isinstance(result, str):
                waiter.callback(result)
            else:
                waiter.errback(result)
