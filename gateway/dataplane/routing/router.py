"""Route selection and upstream path mapping: pure functions over compiled routes."""

from __future__ import annotations

from collections.abc import Iterable

from gateway.config.routes import Route
from gateway.config.upstreams import Upstream

_DEFAULT_PORTS = {"https": 443, "tcp+https": 443, "http": 80}


def route_host_keys(route: Route) -> tuple[str, ...]:
    """Host header values a route answers: ``example.com`` and ``example.com:443`` for
    ``https://example.com``, only ``example.com:8443`` for ``https://example.com:8443``."""
    if route.port is not None:
        return (f"{bracket_host(route.host)}:{route.port}",)
    return (route.host, f"{bracket_host(route.host)}:{_DEFAULT_PORTS.get(route.scheme, 443)}")


def bracket_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def normalise_host(host: str) -> str:
    """Lower-case, with a trailing dot of a fully-qualified name removed."""
    host = host.strip().lower()
    name, sep, port = host.rpartition(":") if not host.endswith("]") else (host, "", "")
    if sep and port.isdigit():
        return f"{name.rstrip('.')}:{port}"
    return host.rstrip(".")


def path_matches(route: Route, path: str) -> bool:
    if route.path:
        return path == route.path
    if route.prefix:
        return path.startswith(route.prefix)
    if route.regex:
        return route.path_regex is not None and route.path_regex.fullmatch(path) is not None
    return True


def match_route(routes: Iterable[Route], host: str, path: str) -> Route | None:
    """The first route, in listed order, whose host and path match."""
    key = normalise_host(host)
    for route in routes:
        if key in route_host_keys(route) and path_matches(route, path):
            return route
    return None


def own_path(path: str) -> bool:
    """The gateway's reserved prefix, on a segment boundary (``/.gatewayish`` is not)."""
    return path == "/.gateway" or path.startswith("/.gateway/")


def upstream_path(route: Route, upstream: Upstream, path: str) -> str:
    """The path sent upstream: the matched prefix (``/`` by default) is replaced by
    ``prefix_rewrite``, else by the path of the ``to`` URL (the reference's trailing
    slash rule: ``to: http://b/anything`` maps ``/foo`` to ``/anythingfoo``)."""
    if route.regex_rewrite_pattern and route.rewrite_regex is not None:
        # the reference writes substitutions as \1, which RE2 for Python accepts as is
        return str(route.rewrite_regex.sub(route.regex_rewrite_substitution, path))
    matched = route.prefix or route.path or "/"
    if not path.startswith(matched):
        matched = ""
    if route.prefix_rewrite is not None:
        return route.prefix_rewrite + path[len(matched):] or "/"
    if upstream.path:
        return upstream.path + path[len(matched):] or "/"
    return path or "/"

