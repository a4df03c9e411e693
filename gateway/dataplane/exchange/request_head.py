"""The request head an upstream receives: the client's head, rewritten for the route.

Hop-by-hop headers (and those the client named in ``Connection``) are stripped, as are
identity headers a client might forge, the route's removals and the ones the authorization
decision removes; then Host is chosen (preserved, rewritten, from a header, from the path,
or the upstream's), X-Forwarded-For/-Proto/-Host are set, and the route's and the
decision's headers added, with the exchange's request id. A pure function of the
exchange: it reads the exchange and its plan (whose header table ``header_table`` made
with the plan) and writes neither; nothing is sent here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twisted.logger import Logger

from gateway.dataplane.exchange.head import NO_NAMES
from gateway.dataplane.routing.header_table import (
    AUTHORIZATION,
    COOKIE,
    HOST,
    HOST_SOURCE,
    SKIP,
    XFF,
    XFH,
    XFP,
)
from gateway.dataplane.routing.router import upstream_path
from gateway.observability.tracing.propagation import CONTEXT_HEADERS
from gateway.sessions.bearer import programmatic_token
from gateway.sessions.cookie import strip_cookie
from gateway.wire.headers import IDENTITY_PREFIX, NAME_INFO, learn_name, underscore_twin

if TYPE_CHECKING:
    from gateway.config.routes import Route
    from gateway.dataplane.exchange.base import ExchangeBase

log = Logger(namespace="gateway.dataplane.headers")


def upstream_request_head(exchange: ExchangeBase) -> bytes:
    """The request line and header block sent to the upstream for ``exchange`` (routed,
    with its host picked), ending with the blank line. (One function: a call more per
    request costs more than its length; what is rare is in the helpers below.)"""
    plan = exchange.plan
    host = exchange.host_state
    assert plan is not None and host is not None
    route = plan.route
    core = exchange.core
    head = exchange.head
    path = upstream_path(route, host.upstream, head.path).encode("latin-1")
    if head.path_parameters:  # /app;jsessionid=1: routed as /app, forwarded whole
        path += head.path_parameters.encode("latin-1")
    actions = plan.request_actions
    named = head.connection_tokens
    parts = [head.method, b" ", path, head.query, b" HTTP/1.1\r\n"]
    incoming_host = b""
    xff: bytes | None = None
    xfp: bytes | None = None
    xfh: bytes | None = None
    rewrite_from: bytes | None = None
    allow = exchange.allow
    extra_remove = allow.remove if allow is not None else NO_NAMES
    trace = exchange.trace
    if trace is not None:  # the caller's trace headers give way to ours
        extra_remove = extra_remove | CONTEXT_HEADERS
    # The gateway's own credentials never reach an upstream: a signed-in route's decision
    # names them; a public route has no decision, so the cookie name and the token
    # format are applied here (an upstream could otherwise replay them to the gateway).
    own_cookie = allow.strip_cookie if allow is not None else core.cookie_name
    names = NAME_INFO
    for name, value in head.headers:
        info = names.get(name)
        if info is None:
            info = learn_name(name)
        low, plain = info
        action = actions.get(low)
        if action == HOST:
            incoming_host = value
        elif named and low in named:
            continue  # Upgrade and Connection of an upgrade are added again below
        elif action is None:  # a name the route does not treat specially
            if plain:  # (no identity prefix, no "_")
                if not extra_remove or low not in extra_remove:
                    parts += (name, b": ", value, b"\r\n")
            elif not _unusual_dropped(exchange, name, low, extra_remove):
                parts += (name, b": ", value, b"\r\n")
        elif action == SKIP or low in extra_remove:
            continue
        elif action == XFF:
            xff = value if xff is None else xff + b", " + value
        elif action == XFP:
            xfp = value
        elif action == XFH:
            xfh = value
        else:
            if action == COOKIE and own_cookie:
                value = strip_cookie(value, own_cookie)
                if not value:
                    continue
            elif _special_dropped(exchange, action, name, low, value, extra_remove):
                continue  # the gateway's own token on a public route; a dropped "_" name
            if low == plan.host_header_name:
                rewrite_from = value
            parts += (name, b": ", value, b"\r\n")
    if not incoming_host:
        incoming_host = head.host.encode("latin-1")
    if route.preserve_host_header or route.host_rewrite or rewrite_from is not None \
            or route.host_path_regex is not None:
        host_value = _rewritten_host(route, incoming_host, rewrite_from, head.path,
                                     host.host_header)
    else:
        host_value = host.host_header
    parts += (b"host: ", host_value, b"\r\n")
    trusted = core.xff_trusted_hops
    if not core.skip_xff_append:
        ip = exchange.facts.peer.encode()
        xff = xff + b", " + ip if xff else ip
    if xff:
        parts += (b"x-forwarded-for: ", xff, b"\r\n")
    if not (trusted and xfp):
        xfp = core.scheme_bytes
    parts += (b"x-forwarded-proto: ", xfp, b"\r\n")
    if not (trusted and xfh):
        xfh = incoming_host
    parts += (b"x-forwarded-host: ", xfh, b"\r\n")
    parts.append(plan.request_headers_block)
    if allow is not None:
        parts.append(allow.head)
    # the client's own x-request-id was dropped (it is in plan.request_drop): the
    # exchange's, chosen when it got its head, is the client's if valid
    parts += (b"x-request-id: ", exchange.rid, b"\r\n")
    if trace is not None:
        for name, value in trace.upstream_headers():
            parts += (name, b": ", value, b"\r\n")
    if head.upgrade:
        parts += (b"connection: upgrade\r\nupgrade: ", head.upgrade, b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def _rewritten_host(route: Route, incoming_host: bytes, rewrite_from: bytes | None,
                    path: str, upstream_host: bytes) -> bytes:
    """The Host a route that rewrites it sends (``preserve_host_header``,
    ``host_rewrite``, ``host_rewrite_header``, ``host_path_regex_rewrite_pattern``), or
    the upstream's own (a path the pattern does not match)."""
    if route.preserve_host_header:
        return incoming_host
    if route.host_rewrite:
        return route.host_rewrite.encode("latin-1")
    if rewrite_from is not None:
        return rewrite_from
    if route.host_path_regex is not None and route.host_path_regex.search(path):
        rewritten: str = route.host_path_regex.sub(
            route.host_path_regex_rewrite_substitution, path, count=1)
        return rewritten.encode("latin-1")
    return upstream_host


def _unusual_dropped(exchange: ExchangeBase, name: bytes, low: bytes,
                     extra_remove: frozenset[bytes]) -> bool:
    """Whether a header the route does not treat specially, whose name has the identity
    prefix or a ``_``, is dropped."""
    if low.startswith(IDENTITY_PREFIX) or low in extra_remove:
        return True
    return b"_" in low and _underscore_dropped(exchange, name, low, extra_remove)


def _special_dropped(exchange: ExchangeBase, action: int, name: bytes, low: bytes,
                     value: bytes, extra_remove: frozenset[bytes]) -> bool:
    """Whether a header of the plan's table (other than Host, skipped ones and the
    X-Forwarded ones) is dropped: the gateway's own token on a public route, or a Host
    source whose name has a ``_``."""
    if action == AUTHORIZATION:
        return exchange.allow is None and bool(programmatic_token([(name, value)]))
    return action == HOST_SOURCE and b"_" in low \
        and _underscore_dropped(exchange, name, low, extra_remove)


def _underscore_dropped(exchange: ExchangeBase, name: bytes, low: bytes,
                        extra_remove: frozenset[bytes]) -> bool:
    """Whether a header whose name has a ``_`` is dropped: always (with a warning) when
    it reads as a header the gateway sets or removes, else by
    ``headers_with_underscores_action: drop``."""
    assert exchange.plan is not None
    if underscore_twin(low, exchange.plan.request_drop, extra_remove):
        log.warn(
            "dropped the client header {header} on {host}{path} from {client}: with '_' "
            "read as '-' it names a header the gateway sets",
            header=name.decode("latin-1"), host=exchange.host, path=exchange.path,
            client=exchange.facts.peer,
        )
        return True
    return bool(exchange.core.underscores_drop)

