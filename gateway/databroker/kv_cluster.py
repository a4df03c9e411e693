"""Redis Cluster (``kvstore+cluster://``, ``kvstores+cluster://``) on top of txredisapi.

txredisapi talks to one server; against a cluster node it only returns ``MOVED`` errors.
This client keeps the slot map (``CLUSTER SLOTS``) and one lazy txredisapi pool per
master, sends each command to the master of its key's slot and follows the redirects:
``MOVED`` updates the map (and refreshes it all, rate-limited), ``ASK`` sends ``ASKING``
and the command back to back on one connection of the importing node. ``TRYAGAIN``,
``CLUSTERDOWN`` and lost connections are retried after a short backoff and a topology
refresh. Every request ends within ``reply_timeout``, with an error that names the node,
the slot and the last reason when it cannot be answered.

The pure parts (key slots, the keys of a command, redirect and ``CLUSTER SLOTS`` replies)
are plain functions in ``cluster_slots``; the client only moves commands and acts on
their results.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import txredisapi
from twisted.internet import defer, task
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.adapters.txredis import TLSFor, handler_factory
from gateway.databroker.cluster_slots import (
    SLOTS,
    Address,
    Arg,
    as_bytes,
    backoff,
    command_slot,
    parse_slot_redirect,
    slot_owners,
)
from gateway.databroker.kv_reconnect import keep_reconnecting

#: Redirects one request follows before it gives up (a slot moving twice is plenty).
MAX_REDIRECTS = 5
#: At most one ``CLUSTER SLOTS`` round per this many seconds (one at a time).
REFRESH_INTERVAL = 0.2
#: How long one attempt waits for a node that has no open connection right now (a dead
#: master must not use up the whole reply timeout; the pool keeps reconnecting).
CONNECT_WAIT = 0.5
#: How long a topology query waits for one node before it asks the next.
QUERY_WAIT = 1.0
#: Error replies that mean "the cluster is busy or changing: try again shortly".
RETRYABLE = ("TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")

log = Logger()


class ClusterUnavailable(txredisapi.ConnectionError):  # type: ignore[misc]
    """No node answered the command in time; says which node and slot, and why."""


# -------------------------------------------------------------------------- client


class ClusterClient:
    """Commands to a Redis Cluster; replies exactly as txredisapi gives them.

    ``redirects`` (``moved`` + ``asks``), ``retries`` and ``refreshes`` count what the
    client went through, for metrics and tests.
    """

    def __init__(self, reactor: Any, addresses: list[tuple[str, int]], *,
                 username: str | None = None, password: str | None = None,
                 tls_for: TLSFor | None = None, reply_timeout: float = 3.0,
                 poolsize: int = 2,
                 on_new_pool: Callable[[Any], None] | None = None) -> None:
        if not addresses:
            raise ValueError("a cluster client needs at least one node address")
        self.clock = reactor
        self.seeds: list[Address] = list(addresses)
        self.username = username or None
        self.password = password or None
        self.tls_for = tls_for
        self.reply_timeout = reply_timeout
        self.poolsize = poolsize
        self.on_new_pool = on_new_pool
        self.moved = self.asks = self.retries = self.refreshes = 0
        self._owners: list[Address | None] = [None] * SLOTS
        self._masters: list[Address] = []
        self._loaded = False
        self._pools: dict[Address, Any] = {}  # address -> txredisapi ConnectionHandler
        self._retiring: dict[Any, Any] = {}  # handler -> DelayedCall of its disconnect
        self._refreshing: Deferred[None] | None = None
        self._refresh_waiters: list[Deferred[None]] = []
        self._last_refresh = -math.inf
        self._turn = 0
        self._closed = False

    # -- public

    @property
    def redirects(self) -> int:
        return self.moved + self.asks

    def execute_command(self, *args: Arg) -> Deferred[Any]:
        return Deferred.fromCoroutine(
            self._execute(args, self.clock.seconds() + self.reply_timeout))

    def pool_factories(self) -> list[Any]:
        return [handler_factory(handler) for handler in self._pools.values()]

    def disconnect(self) -> Deferred[None]:
        self._closed = True
        if self._refreshing is not None:
            self._refreshing.cancel()
        handlers = list(self._pools.values())
        self._pools.clear()
        for handler, call in self._retiring.items():
            if call.active():
                call.cancel()
            handlers.append(handler)
        self._retiring.clear()
        d = defer.gatherResults([h.disconnect() for h in handlers], consumeErrors=True)
        return d.addCallback(lambda _: None)

    # -- one request

    async def _execute(self, args: Sequence[Arg], deadline: float) -> Any:
        slot = command_slot(args)  # CrossSlotError: nothing is sent
        name = as_bytes(args[0]).decode(errors="replace").upper()
        if not self._loaded:
            await self._wait_for_refresh(deadline)  # no map yet: the seeds answer
        ask: Address | None = None
        redirects = attempts = 0
        problem = "still waiting for the slot map"
        while (remaining := deadline - self.clock.seconds()) > 0:
            if self._closed:
                raise ClusterUnavailable("kvstore cluster client is disconnected")
            node = ask or self._node_for(slot)
            where = f"{node[0]}:{node[1]}"
            try:
                if ask is not None:
                    return await self._bounded(
                        Deferred.fromCoroutine(self._asking(node, args)), remaining)
                pool = self._pool(node)
                wait = remaining if handler_factory(pool).size else min(remaining, CONNECT_WAIT)
                return await self._bounded(pool.execute_command(*args), wait)
            except txredisapi.ResponseError as error:
                message = str(error)
                redirect = parse_slot_redirect(message)
                if redirect is None and not message.startswith(RETRYABLE):
                    raise  # the command's own error: the caller's business
                if redirect is not None:
                    redirects += 1
                    if redirects > MAX_REDIRECTS:
                        raise ClusterUnavailable(
                            f"kvstore cluster: {name} for slot {slot} redirected more than "
                            f"{MAX_REDIRECTS} times, last by {where}: {message}") from None
                    target = (redirect.host or node[0], redirect.port)
                    if redirect.kind == "ASK":
                        self.asks += 1
                        ask = target  # this request only; the map stays
                    else:
                        self.moved += 1
                        self._owners[redirect.slot] = target
                        self._schedule_refresh()
                        ask = None
                    continue
                problem = f"{where} answered {message}"
            except (txredisapi.ConnectionError, defer.TimeoutError) as error:
                problem = f"{where}: " + self._explain(error)
            ask = None
            attempts += 1
            self.retries += 1
            self._schedule_refresh()
            pause = min(backoff(attempts), deadline - self.clock.seconds())
            if pause > 0:
                await task.deferLater(self.clock, pause, lambda: None)
        raise ClusterUnavailable(
            f"kvstore cluster: {name} for slot {slot if slot is not None else '(any)'} got "
            f"no answer within {self.reply_timeout:g}s ({attempts} failed attempts); "
            f"last: {problem}")

    def _explain(self, error: Exception) -> str:
        if isinstance(error, defer.TimeoutError):
            return "no connection or no reply in time"
        return str(error) or type(error).__name__

    async def _asking(self, node: Address, args: Sequence[Arg]) -> Any:
        """``ASKING`` and the command on one connection, so that nothing runs between."""
        factory = handler_factory(self._pool(node))
        conn = await factory.getConnection()
        try:
            asked = conn.execute_command("ASKING")
            reply = conn.execute_command(*args)
            try:
                await asked
            except Exception:
                reply.addErrback(lambda _: None)
                raise
            return await reply
        finally:
            if conn.connected:
                factory.connectionQueue.put(conn)

    def _bounded(self, d: Deferred[Any], seconds: float) -> Deferred[Any]:
        return d.addTimeout(seconds, self.clock)

    # -- nodes and pools

    def _node_for(self, slot: int | None) -> Address:
        if slot is not None and (owner := self._owners[slot]) is not None:
            return owner
        nodes = self._masters or self.seeds
        live = [n for n in nodes if n in self._pools and handler_factory(self._pools[n]).size]
        choice = live or nodes
        self._turn += 1
        return choice[self._turn % len(choice)]

    def _pool(self, node: Address) -> Any:
        if self._closed:
            raise ClusterUnavailable("kvstore cluster client is disconnected")
        handler = self._pools.get(node)
        if handler is None:
            host, port = node
            handler = txredisapi.lazyConnectionPool(
                host=host, port=port, dbid=None, poolsize=self.poolsize, reconnect=True,
                username=self.username, password=self.password,
                ssl_context_factory=self.tls_for(host) if self.tls_for else False,
                connectTimeout=self.reply_timeout, replyTimeout=self.reply_timeout)
            self._pools[node] = handler
            keep_reconnecting(handler_factory(handler), f"kvstore cluster: {host}:{port}")
            if self.on_new_pool is not None:
                self.on_new_pool(handler_factory(handler))
        return handler


    def _retire_pools(self, keep: set[Address]) -> None:
        """Close the pools of nodes that are no longer masters, after in-flight commands
        have had their time."""
        for node in [n for n in self._pools if n not in keep]:
            handler = self._pools.pop(node)
            self._retiring[handler] = self.clock.callLater(
                self.reply_timeout, self._close_retired, handler)

    def _close_retired(self, handler: Any) -> None:
        self._retiring.pop(handler, None)
        handler.disconnect()

    # -- topology

    def _schedule_refresh(self) -> None:
        if (self._refreshing is None and not self._closed
                and self.clock.seconds() - self._last_refresh >= REFRESH_INTERVAL):
            self._start_refresh()

    async def _wait_for_refresh(self, deadline: float) -> None:
        self._schedule_refresh()
        if self._refreshing is None:
            return  # one has just failed: go on with the seeds
        waiter: Deferred[None] = Deferred()
        self._refresh_waiters.append(waiter)
        with contextlib.suppress(defer.TimeoutError):  # then it goes on with what is known
            await self._bounded(waiter, max(0.0, deadline - self.clock.seconds()))

    def _start_refresh(self) -> None:
        self._last_refresh = self.clock.seconds()
        self.refreshes += 1
        refreshing = self._refreshing = Deferred.fromCoroutine(self._refresh())

        def done(result: object) -> None:
            self._refreshing = None
            waiters, self._refresh_waiters = self._refresh_waiters, []
            for waiter in waiters:
                if not waiter.called:
                    waiter.callback(None)
            if isinstance(result, Failure) and not self._closed:
                log.failure("kvstore cluster: topology refresh failed", result)
        refreshing.addBoth(done)

    async def _refresh(self) -> None:
        live = [n for n in self._masters
                if n in self._pools and handler_factory(self._pools[n]).size]
        candidates = list(dict.fromkeys([*live, *self._masters, *self.seeds]))
        problems = []
        for node in candidates:
            pool = self._pool(node)
            wait = QUERY_WAIT if handler_factory(pool).size else CONNECT_WAIT
            try:
                reply = await self._bounded(pool.execute_command("CLUSTER", "SLOTS"), wait)
            except (txredisapi.RedisError, defer.TimeoutError) as error:
                problems.append(f"{node[0]}:{node[1]}: {error or type(error).__name__}")
                continue
            owners = slot_owners(reply, node[0])
            masters = list(dict.fromkeys(o for o in owners if o is not None))
            if not masters:
                problems.append(f"{node[0]}:{node[1]}: CLUSTER SLOTS names no master")
                continue
            if masters != self._masters:
                log.info("kvstore cluster: {count} masters ({masters}), from {node}",
                         count=len(masters), node=f"{node[0]}:{node[1]}",
                         masters=" ".join(f"{h}:{p}" for h, p in masters))
            self._owners, self._masters, self._loaded = owners, masters, True
            self._retire_pools(set(masters))
            return
        # Not a cluster (yet), or nobody answered: commands go to the known nodes and
        # their MOVED replies fill the map.
        log.warn("kvstore cluster: no node gave the slot map: {problems}",
                 problems="; ".join(problems) or "no node known")
