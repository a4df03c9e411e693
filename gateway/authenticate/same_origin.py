"""The gateway's own forms accept a browser's submission only from the gateway's own
pages: ``gateway.wire.cross_origin`` decides from ``Sec-Fetch-Site`` and ``Origin``
(the rule is written there); this module knows which origins are the gateway's for the
host a request was sent to, logs a refusal and answers it with the 403 page.

``Endpoints.internal`` asks ``SameOrigin.refusal`` for every request with an unsafe
method (POST and the like) to the gateway's own paths (``/.gateway/...``) before any
endpoint sees it: the SSH sign-in's Allow, sign-out, and any form added later (the
consent page to come is covered by being a POST there). A GET that changes state asks
it itself with ``navigation=True`` (sign-out with its token in the query). The CSRF
tokens stay: a client that sends neither header (curl, scripts, old browsers) is
decided by its token alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from twisted.logger import Logger

from gateway.authorize.hook import Reply, RequestInfo
from gateway.config.routes import Route
from gateway.dataplane.routing.router import bracket_host, normalise_host, route_host_keys
from gateway.wire.cross_origin import cross_origin, origin_of

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity

log = Logger()

REFUSED = ("This form was sent from another site, and the gateway accepts it only from "
           "its own page. Open the page again and use its button there.")


class SameOrigin:
    """The gateway's own origins per host it answers (per snapshot), and the check."""

    def __init__(self, identity: Identity, routes: Iterable[Route]) -> None:
        self.identity = identity
        by_key: dict[str, set[str]] = {}
        # The authenticate service's public URL and each route's ``from`` are origins
        # the gateway serves even where it sees another scheme or port (a load balancer
        # in front ends TLS; a forward-auth proxy sends /.gateway/ here): a page there
        # posts with that Origin.
        if identity.auth_origin:
            auth = urlsplit(identity.auth_origin)
            keys = {identity.auth_host, identity.auth_hostname}
            if auth.port is None:
                default = 443 if auth.scheme == "https" else 80
                keys.add(f"{bracket_host(identity.auth_hostname)}:{default}")
            own = origin_of(auth.scheme, auth.netloc)
            for key in keys:
                by_key.setdefault(normalise_host(key), set()).add(own)
        for route in routes:
            authority = bracket_host(route.host) + (f":{route.port}" if route.port else "")
            own = origin_of(route.scheme, authority)  # "" for TCP routes: no pages
            if own:
                for key in route_host_keys(route):
                    by_key.setdefault(normalise_host(key), set()).add(own)
        self.by_key = {key: frozenset(origins) for key, origins in by_key.items()}

    def origins(self, request: RequestInfo) -> frozenset[str]:
        """The origins a page the gateway served for ``request``'s host has: the one
        the client used (scheme and Host), and the public URLs naming that host."""
        used = origin_of(request.scheme, request.host)
        known = self.by_key.get(normalise_host(request.host), frozenset())
        return known | {used} if used else known

    def refusal(self, request: RequestInfo, endpoint: str, *, navigation: bool = False
                ) -> Reply | None:
        """403 (the error page) and one log line when a browser sent ``request`` from
        another origin; None when it may go on to its endpoint (and its token)."""
        refused = cross_origin(request.headers, self.origins(request), navigation=navigation)
        if refused is None:
            return None
        log.warn("{endpoint}: a request from another origin refused ({why}; "
                 "Sec-Fetch-Site: {sec_fetch_site}, Origin: {origin}, host {host})",
                 endpoint=endpoint, why=refused.why,
                 sec_fetch_site=refused.sec_fetch_site or "(none)",
                 origin=refused.origin or "(none)", host=request.host[:200],
                 client=request.client_ip)
        return self.identity.error(403, REFUSED, request.headers, "cross-origin-request")
