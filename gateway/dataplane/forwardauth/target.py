"""Which request a forward-auth request asks about: pure parsing, no I/O.

The URL comes from the first of these the proxy sent:

1. the ``uri`` query parameter, an absolute URL (nginx: ``/verify?uri=...``);
2. ``X-Original-URL``, an absolute URL (nginx, nginx-ingress);
3. ``X-Forwarded-Proto`` + ``X-Forwarded-Host`` + ``X-Forwarded-Uri`` (caddy's
   ``forward_auth``, traefik's ``ForwardAuth``).

``X-Forwarded-Method`` names the method (the proxies ask with GET whatever the
original method was). When a later source is also complete and names another URL, the
request is refused: the third-party proxy sets one of them, so a second, different one
came from the client and must not choose which route is checked.

nginx's ``$request_uri`` is not escaped, so ``/verify?uri=https://app/p?a=1&b=2`` arrives
with ``&b=2`` as a parameter of its own. A ``uri`` value that is not percent-encoded
therefore runs to the end of the query string (``uri`` must come last); an encoded one
(``uri=https%3A%2F%2F...``) is one parameter, decoded once.

Every URL is checked before it is used: http or https, a plain ``host[:port]`` (no user
information, no backslash, no control characters), a path that normalises exactly as
the data plane normalises request paths (``/public/../admin`` is ``/admin``).
Whether a route serves it is ``route_for``'s question.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from urllib.parse import unquote

from gateway.dataplane.routing.plan import Plan, RoutePlan
from gateway.dataplane.routing.router import normalise_host
from gateway.wire.normalize import BadTarget, normalise_target

Headers = list[tuple[bytes, bytes]]

_URL = re.compile(r"(https?)://([^/?#]*)(.*)", re.IGNORECASE | re.DOTALL)
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_HOST_PORT = re.compile(
    rf"(\[[0-9a-f:.]+\]|{_LABEL}(?:\.{_LABEL})*\.?)(?::([0-9]{{1,5}}))?", re.IGNORECASE)
_METHOD = re.compile(rb"[A-Z]{1,20}")
_DEFAULT_PORTS = {"http": "80", "https": "443"}


class TargetError(ValueError):
    """The forward-auth request names no usable URL; ``status`` and the message (safe
    to show: it never repeats what the client sent) are the answer."""

    def __init__(self, status: int, message: str, reason: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


@dataclass(frozen=True, slots=True)
class CheckedRequest:
    """The request being checked, as the data plane would have seen it."""

    method: bytes
    scheme: str  # "http" or "https"
    host: str  # lower-case "name" or "name:port", as a Host header
    path: str  # normalised
    query: bytes  # with its "?", or b""
    source: str  # "uri", "x-original-url" or "x-forwarded"
    # the proxy named the method (X-Forwarded-Method); else ``method`` is its own, GET
    method_named: bool = True

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}"

    @property
    def url(self) -> str:
        return f"{self.origin}{self.path}{self.query.decode('latin-1')}"

    def same_resource(self, other: CheckedRequest) -> bool:
        """Host (default port ignored), path and query equal: the scheme may differ
        where TLS ends in front of the proxy."""
        return (_without_default_port(self.scheme, self.host)
                == _without_default_port(other.scheme, other.host)
                and self.path == other.path and self.query == other.query)


def uri_param(query: bytes) -> str | None:
    """The ``uri`` parameter of a raw query string (``?`` included or not), or None."""
    text = query.decode("latin-1").removeprefix("?")
    if not text:
        return None
    parts = text.split("&")
    for index, part in enumerate(parts):
        name, eq, value = part.partition("=")
        if not eq or unquote(name) != "uri":
            continue
        low = value[:8].lower()
        if low.startswith(("http%3a", "https%3a")):
            return unquote(value, encoding="latin-1")
        return "&".join([value, *parts[index + 1:]])
    return None


def parse_url(url: str, source: str, method: bytes,
              reject_parameters: bool = False) -> CheckedRequest:
    """An absolute http(s) URL as a ``CheckedRequest``; ``TargetError`` (400) otherwise. Its path
    is read as for a request the gateway carries: without ``;`` parameters (the proxy
    in front forwards its own path; the upstream behind it drops them too)."""
    if any(ord(c) < 0x21 or ord(c) == 0x7F or c == "\\" for c in url):
        raise _bad(source, "control characters, spaces or backslashes")
    match = _URL.fullmatch(url)
    if match is None:
        raise _bad(source, "not an absolute http or https URL")
    scheme, authority, rest = match.group(1).lower(), match.group(2), match.group(3)
    host = _authority(authority)
    if host is None:
        raise _bad(source, "no valid host (user information, or not a host name)")
    if not rest or rest.startswith(("?", "#")):
        rest = "/" + rest
    if not rest.startswith("/"):
        raise _bad(source, "not an absolute http or https URL")
    try:
        path, _, query = normalise_target(rest.encode("latin-1"), reject_parameters)
    except (BadTarget, UnicodeEncodeError) as exc:
        raise _bad(source, f"its path is refused ({exc})") from None
    return CheckedRequest(method, scheme, host, path.decode("latin-1"), query, source)


def _authority(authority: str) -> str | None:
    """``host[:port]`` lower-cased without a trailing dot; None for anything else."""
    match = _HOST_PORT.fullmatch(authority)
    if match is None:
        return None
    port = match.group(2)
    if port is not None and not 0 < int(port) < 65536:
        return None
    return normalise_host(authority)


def _without_default_port(scheme: str, host: str) -> str:
    name, sep, port = host.rpartition(":")
    if sep and not host.endswith("]") and port == _DEFAULT_PORTS.get(scheme):
        return name
    return host


def _bad(source: str, what: str) -> TargetError:
    return TargetError(400, f"the URL in {_SOURCE_NAMES[source]} is refused: {what}",
                       f"bad-url-{source}")


_SOURCE_NAMES = {"uri": "the uri parameter", "x-original-url": "X-Original-URL",
                 "x-forwarded": "X-Forwarded-Proto/-Host/-Uri"}


def _header(headers: Headers, name: bytes) -> str | None:
    """One header's value (several lines joined with ``,``), stripped; None if absent."""
    values = [v for n, v in headers if n.lower() == name]
    if not values:
        return None
    return b",".join(values).decode("latin-1").strip()


def _forwarded(headers: Headers, method: bytes, reject_parameters: bool) -> CheckedRequest | None:
    """The X-Forwarded-* source, or None when it is not complete."""
    proto = _header(headers, b"x-forwarded-proto")
    host = _header(headers, b"x-forwarded-host")
    uri = _header(headers, b"x-forwarded-uri")
    if proto is None or host is None or uri is None:
        return None
    if "," in proto or "," in host:
        raise _bad("x-forwarded", "more than one value")
    if _authority(host) is None:
        raise _bad("x-forwarded", "no valid host (user information, or not a host name)")
    if not uri.startswith("/"):
        raise _bad("x-forwarded", "X-Forwarded-Uri is not a path")
    if proto.lower() not in _DEFAULT_PORTS:
        raise _bad("x-forwarded", "X-Forwarded-Proto is neither http nor https")
    return parse_url(f"{proto.lower()}://{host}{uri}", "x-forwarded", method,
                     reject_parameters)


def find_target(query: bytes, headers: Headers, method: bytes,
                reject_parameters: bool = False) -> CheckedRequest:
    """The request a forward-auth request (its raw ``query``, ``headers`` and
    ``method``) asks about; ``TargetError`` when there is none or sources disagree.
    ``reject_parameters``: ``path_with_parameters_action: reject``."""
    forwarded_method = _header(headers, b"x-forwarded-method")
    if forwarded_method is not None:
        method = forwarded_method.upper().encode("latin-1")
        if _METHOD.fullmatch(method) is None:
            raise TargetError(400, "X-Forwarded-Method is not a method", "bad-method")
    found: list[CheckedRequest] = []
    uri = uri_param(query)
    if uri is not None:
        found.append(parse_url(uri, "uri", method, reject_parameters))
    original = _header(headers, b"x-original-url")
    if original is not None:
        found.append(parse_url(original, "x-original-url", method, reject_parameters))
    forwarded = _forwarded(headers, method, reject_parameters)
    if forwarded is not None:
        found.append(forwarded)
    if not found:
        raise TargetError(400, "no URL to check: send uri=<absolute URL>, X-Original-URL, "
                               "or X-Forwarded-Proto, -Host and -Uri", "no-url")
    first = found[0]
    for other in found[1:]:
        if not first.same_resource(other):
            raise TargetError(
                400, f"{_SOURCE_NAMES[first.source]} and {_SOURCE_NAMES[other.source]} "
                     "name different URLs", "conflicting-urls")
    return first if forwarded_method is not None else replace(first, method_named=False)


def route_for(plan: Plan, target: CheckedRequest) -> RoutePlan | None:
    """The HTTP route that serves ``target``: same scheme as its ``from``, the same
    host and port rules and path matching as requests the gateway carries itself."""
    for candidate in plan.by_host.get(target.host, ()):
        if (not candidate.tcp and candidate.route.scheme == target.scheme
                and candidate.matches(target.path)):
            return candidate
    return None
