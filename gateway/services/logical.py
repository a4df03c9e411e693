"""The authenticate, authorize and databroker services (filled in by their own issues).

Each already follows configuration snapshots, so the service tree, start-up, reload
and shutdown are exercised end to end before their features land.
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
