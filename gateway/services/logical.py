"""The authenticate, authorize and databroker services as named nodes of the tree.

Their work is done by what ``gateway.tree`` hangs under or beside them (the databroker
under ``DataBrokerService``; the identity holder, the gRPC servers and the proxy's
listeners beside the others); each follows configuration snapshots, and its name is
what ``services`` selected, shown in the tree and its start-up and stop lines.
"""

from __future__ import annotations

from gateway.services.base import SnapshotService


class AuthenticateService(SnapshotService):
    """Sign-in, callback, sign-out and JWKS on ``authenticate_service_url``."""

    label = "authenticate"


class AuthorizeService(SnapshotService):
    """Policy decisions and the signed identity assertion."""

    label = "authorize"


class DataBrokerService(SnapshotService):
    """Sessions, users and groups in memory or kvstore."""

    label = "databroker"
