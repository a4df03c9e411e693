"""``/.gateway/routes``: the routes the signed-in person may open now. A link for each
HTTP route, the ``gateway tcp`` command line for each TCP route, public routes marked,
and a note on routes whose policy reads the request (its method, path, network, client
certificate or the clock): whether they let this person in can change from one request
to the next. JSON of the same for scripts.

The identity layer decides which routes are listed (``gateway.authenticate.account``,
with the daemon's evaluator); this module says what is shown of a route it is given, and
never more than its address: no rule, criterion or value of any policy.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from gateway.config.routes import Route
from gateway.pages.layout import (
    HTML,
    JSON,
    Action,
    Look,
    Pairs,
    buttons,
    document,
    esc,
    iso,
    page_headers,
    utc,
)
from gateway.policy import REQUEST_FACTS
from gateway.policy.nodes import criteria_of

# The request facts that make a decision hold for one request only (``Policy.reads``;
# ``cors`` is left out: it is true for CORS preflights, which nobody opens).
# What a route's access may depend on, as the portal names it (JSON) and says it.
DEPENDS_TEXT = {
    "method": "the kind of request (its method)",
    "path": "the page you open (its path)",
    "network": "the network you connect from",
    "client_certificate": "your client certificate",
    "date": "the date",
    "day_of_week": "the day of the week",
    "time_of_day": "the time of day",
    "mcp": "the MCP request (its method or tool)",
}
_BY_CRITERION = {
    "http_method": "method", "http_path": "path", "gateway_routes": "path",
    "source_ip": "network", "client_certificate": "client_certificate", "date": "date",
    "day_of_week": "day_of_week", "time_of_day": "time_of_day",
    "mcp_method": "mcp", "mcp_tool": "mcp",
}


@dataclass(frozen=True, slots=True)
class PortalRoute:
    """One route the person may open. HTTP: ``url`` to open. TCP: ``destination``
    (``host:port``) and the ``command`` that opens a tunnel to it. ``method`` and
    ``path``: the request the decision was made for (``""`` for a public route, which
    is not decided); ``depends_on``: ``DEPENDS_TEXT`` keys."""

    url: str
    name: str = ""
    public: bool = False
    destination: str = ""
    command: str = ""
    method: str = ""
    path: str = ""
    depends_on: tuple[str, ...] = ()

    @property
    def tcp(self) -> bool:
        return bool(self.destination)


@dataclass(frozen=True, slots=True)
class Portal:
    """The page: who it is for, when the routes were decided, and the routes."""

    who: str
    at: float
    routes: tuple[PortalRoute, ...]
    host: str = ""


def entry_path(route: Route) -> str:
    """The path a person opens an HTTP route at: its ``path``, its ``prefix``, else
    ``/`` (a ``regex`` route too: no one path stands for it)."""
    return route.path or route.prefix or "/"


def _authority(host: str, port: int | None) -> str:
    name = f"[{host}]" if ":" in host else host
    return f"{name}:{port}" if port else name


def depends_on(route: Route) -> tuple[str, ...]:
    """What the route's policy reads of the request, as ``DEPENDS_TEXT`` keys (none for
    a policy that reads only who the person is)."""
    if not route.policy.reads & REQUEST_FACTS:
        return ()
    found = {_BY_CRITERION.get(c.name) for c in criteria_of(route.policy.document)}
    return tuple(key for key in DEPENDS_TEXT if key in found)


def portal_route(route: Route, *, public: bool = False, method: str = "", path: str = "",
                 gateway_url: str = "") -> PortalRoute:
    """What the portal shows of ``route``. ``gateway_url``: the ``--gateway-url`` a TCP
    command needs (``""``: the destination's own name leads to the gateway)."""
    authority = _authority(route.host, route.port)
    depends = () if public else depends_on(route)
    if route.tcp:
        words = ["gateway", "tcp"] + (["--gateway-url", gateway_url] if gateway_url else [])
        command = " ".join(shlex.quote(w) for w in [*words, authority])
        return PortalRoute(f"{route.scheme}://{authority}", route.name, public, authority,
                           command, method, path, depends)
    url = f"{route.scheme}://{authority}{entry_path(route)}"
    return PortalRoute(url, route.name, public, method=method, path=path, depends_on=depends)


def _things(keys: tuple[str, ...]) -> str:
    words = [DEPENDS_TEXT[k] for k in keys]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def note(route: PortalRoute, at: float) -> str:
    """The sentence on a route whose access depends on the request (``""`` otherwise)."""
    if not route.depends_on:
        return ""
    what = "A tunnel" if route.tcp else f"A {route.method} of {route.path}"
    return (f"Access depends on {_things(route.depends_on)}. {what} is allowed for you "
            f"now ({utc(at)}); other requests or times may not be.")


def portal_json(portal: Portal) -> bytes:
    routes: list[dict[str, Any]] = []
    for r in portal.routes:
        entry: dict[str, Any] = {"type": "tcp" if r.tcp else "http", "url": r.url,
                                 "name": r.name, "public": r.public}
        if r.tcp:
            entry |= {"destination": r.destination, "command": r.command}
        entry |= {"checked": {"method": r.method, "path": r.path} if r.method else None,
                  "depends_on": list(r.depends_on), "note": note(r, portal.at)}
        routes.append(entry)
    doc = {"signed_in_as": portal.who, "checked_at": iso(portal.at),
           "checked_at_unix": int(portal.at), "routes": routes}
    return json.dumps(doc, indent=1).encode() + b"\n"


def _item(route: PortalRoute, at: float) -> str:
    parts = [f"<strong>{esc(route.name)}</strong> " if route.name else ""]
    if route.tcp:
        parts.append(f"<code>{esc(route.command)}</code> <span class=tag>TCP</span>")
    else:
        parts.append(f'<a href="{esc(route.url)}">{esc(route.url)}</a>')
    if route.public:
        parts.append(" <span class=tag>public</span>")
    if route.tcp:
        parts.append(f"<p class=note>A tunnel to <code>{esc(route.destination)}</code>: run "
                     "the command, then point your client at the local address it "
                     "prints.</p>")
    said = note(route, at)
    if said:
        parts.append(f"<p class=note>{esc(said)}</p>")
    return f"<li>{''.join(parts)}</li>"


def portal_html(portal: Portal, look: Look, actions: tuple[Action, ...]) -> bytes:
    if portal.routes:
        items = "".join(_item(r, portal.at) for r in portal.routes)
        listing = f"<ul class=routes>{items}</ul>"
    else:
        listing = "<p>No route is open to you right now.</p>"
    body = ("<h1>Your routes</h1>"
            + (f"<p class=code>on {esc(portal.host)}</p>" if portal.host else "")
            + f"<p>The routes <strong>{esc(portal.who)}</strong> may open now "
            f"({esc(utc(portal.at))}).</p>{listing}{buttons(actions)}")
    return document("Your routes", body, look)


def render_portal(portal: Portal, look: Look, actions: tuple[Action, ...], *,
                  as_json: bool) -> tuple[bytes, Pairs]:
    if as_json:
        return portal_json(portal), page_headers(look, JSON)
    return portal_html(portal, look, actions), page_headers(look, HTML)
