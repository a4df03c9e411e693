"""``redirect`` routes: the Location of the answer, computed without I/O."""

from __future__ import annotations

from gateway.config.routes import Route


def redirect_location(route: Route, scheme: str, host: str, path: str, query: str) -> str:
    """Where a redirect route sends the client (query includes its leading ``?``).

    ``host`` is the request's Host (a port in it is dropped when the scheme or host
    changes, so ``https_redirect`` lands on the default https port).
    """
    spec = route.redirect
    assert spec is not None
    new_scheme = "https" if spec.https_redirect else (spec.scheme_redirect or scheme)
    name, port = _split_host(host)
    if spec.host_redirect:
        name, port = _split_host(spec.host_redirect)
    elif new_scheme != scheme:
        port = ""
    if spec.port_redirect:
        port = str(spec.port_redirect)
    if spec.path_redirect:
        path = spec.path_redirect
    elif spec.prefix_rewrite is not None:
        matched = route.prefix or route.path or "/"
        rest = path[len(matched):] if path.startswith(matched) else path
        path = spec.prefix_rewrite + rest
    if not path.startswith("/"):
        path = "/" + path
    default = {"http": "80", "https": "443"}.get(new_scheme)
    authority = name if not port or port == default else f"{name}:{port}"
    return f"{new_scheme}://{authority}{path}{'' if spec.strip_query else query}"


def _split_host(host: str) -> tuple[str, str]:
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1], host[end + 2:] if host[end + 1: end + 2] == ":" else ""
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit():
        return name, port
    return host, ""
