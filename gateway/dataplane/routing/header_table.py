"""A route's table of the request header names its upstream head treats specially,
made with the route's plan (``plan.RoutePlan.request_actions``) and read by
``exchange/request_head.py`` for every header a request forwards.

One dictionary lookup per header replaces a dozen comparisons; any name the table does
not list is forwarded after the generic checks (identity prefix, ``_``, the decision's
removals).
"""

from __future__ import annotations

from gateway.wire.headers import HOP_BY_HOP, IDENTITY_PREFIX

SKIP = 0  # hop-by-hop, or removed by the route (remove/set_request_headers, claims, the id)
HOST = 1
XFF = 2
XFP = 3
XFH = 4
COOKIE = 5
AUTHORIZATION = 6
HOST_SOURCE = 7  # host_rewrite_header: the upstream's Host comes from it


def request_actions(host_header_name: bytes, request_drop: frozenset[bytes]) -> dict[bytes, int]:
    """The table of a route with ``host_rewrite_header`` ``host_header_name`` (lower
    case, or empty) and the lower-case names it removes, in the precedence the checks
    had when they were written out in turn: Host first, then hop-by-hop, then the
    route's removals (``X-Request-Id`` among them: the upstream gets the exchange's,
    checked), then the names the gateway sets or filters."""
    actions: dict[bytes, int] = {}
    if host_header_name and not host_header_name.startswith(IDENTITY_PREFIX):
        actions[host_header_name] = HOST_SOURCE
    actions.update({b"cookie": COOKIE, b"authorization": AUTHORIZATION,
                    b"x-forwarded-for": XFF, b"x-forwarded-proto": XFP,
                    b"x-forwarded-host": XFH})
    actions.update(dict.fromkeys(request_drop, SKIP))
    actions[b"x-request-id"] = SKIP
    actions.update(dict.fromkeys(HOP_BY_HOP, SKIP))
    actions[b"host"] = HOST
    return actions
