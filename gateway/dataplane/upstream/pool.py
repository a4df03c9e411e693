"""The pool of persistent HTTP/1.1 connections per upstream (``http1_client``), with
an idle bound per upstream and in all, and a reaper for connections idle too long."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import wrapClientTLS
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.task import LoopingCall

from gateway.dataplane.upstream.hosts import UpstreamHost
from gateway.dataplane.upstream.http1_client import PoolKey, UpstreamConnection
from gateway.net.endpoints import client_endpoint
from gateway.tls.client import TLSClientConfig, is_ip_literal
from gateway.twisted_ext.connect import connect_protocol

# Idle connections kept per upstream. A busy HTTP/2 client has up to 128 requests in
# flight per connection, and many clients at once may need hundreds of upstream
# connections: a lower bound closes and reopens them by the hundred every second.
MAX_IDLE_PER_KEY = 1024


class Pool:
    """Idle persistent connections per (scheme, host, port, TLS settings)."""

    def __init__(self, reactor: Any, *, max_idle_per_key: int = MAX_IDLE_PER_KEY,
                 idle_timeout: float = 60.0,
                 resolve: Callable[[str, int], Deferred[str]] | None = None) -> None:
        self.reactor = reactor
        self.max_idle_per_key = max_idle_per_key
        # All keys together (descriptors): set by the core from the connection cap.
        self.max_idle_total = max_idle_per_key
        self.idle_timeout = idle_timeout
        self.resolve = resolve
        self._idle: dict[PoolKey, list[UpstreamConnection]] = {}
        self._reaper = LoopingCall(self._reap)
        self._reaper.clock = reactor

    def start(self) -> None:
        if not self._reaper.running:
            self._reaper.start(max(self.idle_timeout / 4, 1.0), now=False)

    def stop(self) -> None:
        if self._reaper.running:
            self._reaper.stop()
        for connections in self._idle.values():
            for conn in connections:
                conn.reusable = False
                if conn.transport is not None:
                    conn.transport.loseConnection()
        self._idle.clear()

    @staticmethod
    def key_for(host: UpstreamHost, tls: TLSClientConfig | None) -> PoolKey:
        up = host.upstream
        return (up.scheme, up.host, up.port, tls if up.scheme == "https" else None)

    def take_idle(self, key: PoolKey) -> UpstreamConnection | None:
        connections = self._idle.get(key)
        while connections:
            conn = connections.pop()
            if conn.connected:
                return conn
        return None

    def connect(self, key: PoolKey, timeout: float) -> Deferred[UpstreamConnection]:
        _, host, port, tls = key
        endpoint = client_endpoint(self.reactor, host, port, timeout)
        if self.resolve is not None and not is_ip_literal(host):
            resolved = self.resolve(host, port)
            return cast(Deferred[UpstreamConnection], resolved.addCallback(
                lambda ip: self._open(client_endpoint(self.reactor, ip, port, timeout), key,
                                      host, tls)))
        return self._open(endpoint, key, host, tls)

    def _open(self, endpoint: IStreamClientEndpoint, key: PoolKey, host: str,
              tls: TLSClientConfig | None) -> Deferred[UpstreamConnection]:
        if tls is not None:
            from gateway.tls.client import connection_creator

            endpoint = wrapClientTLS(connection_creator(tls, host), endpoint)
        return connect_protocol(endpoint, UpstreamConnection(self, key))

    def release(self, conn: UpstreamConnection) -> None:
        """Return a connection after a complete exchange, or close it if not reusable."""
        if not (conn.reusable and conn.connected):
            if conn.transport is not None and conn.connected:
                conn.transport.loseConnection()
            return
        idle = self._idle.get(conn.key)
        if idle is None:  # (not setdefault: that builds a list on every release)
            idle = self._idle[conn.key] = []
        if len(idle) >= self.max_idle_per_key or self.idle_count() >= self.max_idle_total:
            conn.transport.loseConnection()  # type: ignore[union-attr]
            return
        conn.idle_since = self.reactor.seconds()
        # An idle connection always reads: the next exchange needs its response, and a
        # close by the upstream must be noticed. Whatever paused it for the previous
        # exchange (a slow client) is over.
        if conn.paused:
            conn.resumeProducing()
        idle.append(conn)

    def forget(self, conn: UpstreamConnection) -> None:
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def idle_count(self) -> int:
        return sum(map(len, self._idle.values()))

    def _reap(self) -> None:
        limit = self.reactor.seconds() - self.idle_timeout
        for connections in self._idle.values():
            stale = [c for c in connections if c.idle_since <= limit]
            for conn in stale:
                connections.remove(conn)
                conn.reusable = False
                if conn.transport is not None:
                    conn.transport.loseConnection()
