"""``raise_at_start``: a listening service whose port cannot be bound fails the start.

``StreamServerEndpointService`` logs a failed ``listen`` and carries on, unless its
private ``_raiseSynchronously`` is set (``twistd`` sets it for its own services), when
``privilegedStartService`` raises: a gateway whose port is taken must stop at start-up
with the reason, not run deaf with a log line.
"""

from __future__ import annotations

from twisted.application.internet import StreamServerEndpointService

RELIES_ON = (
    ("twisted.application.internet", "StreamServerEndpointService",
     ("_raiseSynchronously",)),
)


def raise_at_start(service: StreamServerEndpointService) -> StreamServerEndpointService:
    """Make ``service`` raise from ``privilegedStartService`` when it cannot listen."""
    service._raiseSynchronously = True
    return service
