"""An MCP route as an OAuth protected resource (RFC 9728, RFC 8707): its resource
identifier, the route a ``resource`` parameter names, and where its metadata is.

Each MCP route's host is its own authorization server, reached at the scheme and host
the client used (``issuer``). A route's resource identifier is that origin plus the
route's ``path`` or ``prefix`` without a trailing slash (the MCP text's canonical
form; a route on ``/`` is the bare origin). A token is bound to the route its resource
names; a regex route has no path of its own, so it is the bare origin too (two MCP
routes of a host with equal identifiers are refused at load:
``config.validate_mcp.mcp_resources_distinct``). Pure."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from gateway.config.routes import Route
from gateway.dataplane.routing.router import normalise_host, route_host_keys

PRM_PATH = "/.well-known/oauth-protected-resource"
AS_METADATA_PATH = "/.well-known/oauth-authorization-server"
OIDC_DISCOVERY_PATH = "/.well-known/openid-configuration"


def issuer(scheme: str, host: str) -> str:
    """The authorization server of an MCP route host, as the client reached it (RFC
    8414's issuer: no path, no trailing slash)."""
    return f"{scheme}://{host}"


def resource_path(route: Route) -> str:
    """The path part of the route's resource identifier (``""`` on ``/``)."""
    return (route.path or route.prefix).rstrip("/")


def resource_of(route: Route, scheme: str, host: str) -> str:
    return issuer(scheme, host) + resource_path(route)


def metadata_url(route: Route, scheme: str, host: str) -> str:
    """The path-aware protected resource metadata URL (RFC 9728 3.1)."""
    return issuer(scheme, host) + PRM_PATH + resource_path(route)


def canonical(resource: str) -> str:
    """``resource`` in the canonical form the identifiers above have: lower-case scheme
    and host (the MCP text asks servers to accept upper case), no trailing slash; ``""``
    for what is no absolute http(s) URI or carries a fragment (RFC 8707 2)."""
    if not resource or any(ord(c) < 0x21 or ord(c) == 0x7F for c in resource) or \
            "#" in resource or "\\" in resource:
        return ""
    try:
        parts = urlsplit(resource)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        return ""
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc \
            or parts.query:
        return ""
    return f"{scheme}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def serves_host(route: Route, host: str) -> bool:
    return normalise_host(host) in route_host_keys(route)


def mcp_routes(routes: Iterable[Route], host: str) -> list[Route]:
    """The MCP routes of ``host`` (the request's Host), in listed order."""
    return [r for r in routes if r.mcp is not None and serves_host(r, host)]


def within(resource: str, base: str) -> bool:
    """Whether ``resource`` is the resource ``base`` (canonical) or a URL under its path
    (a client that names its MCP endpoint, ``https://h/mcp/rpc``, rather than the route,
    ``https://h/mcp``): the token is then for ``base``."""
    wanted = canonical(resource)
    return bool(wanted) and (wanted == base or wanted.startswith(base + "/"))


def route_named(routes: Iterable[Route], scheme: str, host: str, resource: str
                ) -> Route | None:
    """The MCP route of this host that ``resource`` names or lies under (the most
    specific one; ``None``: none)."""
    best: Route | None = None
    best_length = -1
    for route in mcp_routes(routes, host):
        base = canonical(resource_of(route, scheme, host))
        if within(resource, base) and len(base) > best_length:
            best, best_length = route, len(base)
    return best


def route_of_metadata_path(routes: Iterable[Route], host: str, path: str) -> Route | None:
    """The MCP route whose protected resource metadata ``path`` asks for: the path after
    the well-known prefix is the route's resource path (``/.well-known/
    oauth-protected-resource`` alone: the route on ``/``)."""
    if path != PRM_PATH and not path.startswith(PRM_PATH + "/"):
        return None
    wanted = path[len(PRM_PATH):].rstrip("/")
    return next((r for r in mcp_routes(routes, host) if resource_path(r) == wanted), None)
