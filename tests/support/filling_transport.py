"""A ``StringTransport`` whose send buffer fills up, as a real socket's does.

Twisted's ``FileDescriptor.write`` pauses the registered streaming producer once more
than ``bufferSize`` bytes wait to be sent, and resumes it when the buffer drains. The
plain ``StringTransport`` never does either, so flow-control bugs (a producer left
paused, a producer resumed after it was unregistered) stay invisible in memory tests.
"""

from __future__ import annotations

from twisted.internet.testing import StringTransport


class FillingTransport(StringTransport):
    """``write`` pauses the producer past ``limit`` buffered bytes; ``drain`` empties the
    buffer and resumes it (what the reactor does when the peer reads)."""

    def __init__(self, limit: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.limit = limit
        self.producer_paused_by_us = False

    def write(self, data: bytes) -> None:
        super().write(data)
        self._maybePauseProducer()

    def _maybePauseProducer(self) -> None:
        """As ``twisted.internet.abstract.FileDescriptor``'s: pause a streaming producer
        when the buffer is past the limit (``write`` calls it; a consumer registering
        a producer after it filled the buffer may too)."""
        if self.producer is not None and self.streaming and \
                len(self.io.getvalue()) > self.limit and not self.producer_paused_by_us:
            self.producer_paused_by_us = True
            self.producer.pauseProducing()

    def drain(self) -> bytes:
        data: bytes = self.value()
        self.clear()
        if self.producer is None:
            self.producer_paused_by_us = False
        elif self.producer_paused_by_us:
            self.producer_paused_by_us = False
            self.producer.resumeProducing()  # may fill the buffer (and pause) again
        return data
