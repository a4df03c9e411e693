"""A token bucket, for limits that allow a burst and then a rate: a client's HTTP/2
control frames (``dataplane/http2/guard``), the traces callers may force
(``observability/tracing/tracer``). Plain arithmetic on a clock the caller reads."""

from __future__ import annotations


class Budget:
    """A token bucket: ``take`` is False once the burst is spent faster than it refills."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, burst: float, rate: float, now: float) -> None:
        self.burst = burst
        self.rate = rate
        self.tokens = burst
        self.stamp = now

    def take(self, now: float, credit: float = 0.0) -> bool:
        tokens = self.tokens + (now - self.stamp) * self.rate + credit
        self.stamp = now
        if tokens > self.burst:
            tokens = self.burst
        if tokens < 1.0:
            self.tokens = tokens
            return False
        self.tokens = tokens - 1.0
        return True
