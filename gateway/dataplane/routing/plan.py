"""The compiled form of a snapshot for the data plane: what each request looks up.

Built once per configuration snapshot: routes indexed by Host key, header rules as
ready-to-write bytes, a load balancer over live host state. Host state (health,
ejection, load) is carried over from the previous plan for routes whose upstreams and
balancing settings did not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gateway.config.mcp import McpRoute
from gateway.config.routes import OVERRIDE_HEADERS, Route
from gateway.config.snapshot import Snapshot
from gateway.dataplane.routing.header_table import request_actions
from gateway.dataplane.routing.router import normalise_host, path_matches, route_host_keys
from gateway.dataplane.upstream.balancer import Balancer, make_balancer
from gateway.dataplane.upstream.hosts import UpstreamHost, hosts_for
from gateway.mcp.session_ids import SessionIds
from gateway.observability.request_metrics import (
    NO_ROUTE,
    UNKNOWN_HOST,
    route_host_label,
    route_label,
)
from gateway.tls.client import TLSClientConfig
from gateway.tls.client_certs import ClientCertPolicy

Pairs = tuple[tuple[bytes, bytes], ...]
_REQUEST_ID = frozenset({b"x-request-id"})


def _encode(mapping: Any) -> Pairs:
    return tuple((str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in mapping.items())


@dataclass(eq=False, slots=True)
class RoutePlan:
    route: Route
    hosts: tuple[UpstreamHost, ...]
    balancer: Balancer | None
    response_headers: Pairs
    response_header_names: frozenset[bytes]
    request_headers: Pairs
    request_drop: frozenset[bytes]
    response_rewrites: tuple[tuple[bytes, bytes, bytes], ...]
    tls: TLSClientConfig | None
    public: bool
    timeout: float
    host_header_name: bytes = b""
    hashed: bool = False  # RING_HASH/MAGLEV: requests carry the client address as key
    client_cert: ClientCertPolicy | None = None  # mTLS required of clients on this route
    tcp: bool = False  # a tcp+https route: reached with CONNECT only
    metric_labels: tuple[str, str] = (UNKNOWN_HOST, NO_ROUTE)  # request metrics: host, route
    # rows of the request metrics this route counted into (exchange/measure.py)
    metric_rows: dict[tuple[Any, ...], list[float]] = field(default_factory=dict)
    # what the upstream request head does with each header name this route treats
    # specially (``header_table``), and the route's own request headers as ready bytes:
    # made with the plan, read by exchange/request_head.py
    # an MCP route's ``mcp`` (``None``: not one): its POST bodies are read and decided
    # message by message (exchange/mcp_request.py)
    mcp: McpRoute | None = None
    # the binding of its session ids to the person (exchange/mcp_request.py); ``None``
    # on a public route (nobody to bind to) and on every other route
    mcp_sessions: SessionIds | None = None
    # how long the upstream may stay silent while a request is in flight (for its
    # response head, between pieces of its body): the route ``timeout``; on an MCP
    # route, whose responses are long-lived event streams, ``timeout_idle`` when that is
    # longer (infinite when 0)
    response_timeout: float = 30.0
    request_actions: dict[bytes, int] = field(init=False)
    request_headers_block: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.request_actions = request_actions(self.host_header_name, self.request_drop)
        self.request_headers_block = b"".join(b"%s: %s\r\n" % pair
                                              for pair in self.request_headers)

    def matches(self, path: str) -> bool:
        return path_matches(self.route, path)


@dataclass(eq=False, slots=True)
class Plan:
    snapshot: Snapshot
    by_host: dict[str, tuple[RoutePlan, ...]]
    routes: tuple[RoutePlan, ...]
    response_headers: Pairs
    state_key: dict[tuple[Any, ...], tuple[tuple[UpstreamHost, ...], Balancer | None]] = field(
        default_factory=dict
    )
    forward_auth_host: str = ""  # host name of ``forward_auth_url``; "" when off
    # rows of the request metrics unrouted requests counted into (exchange/measure.py)
    unrouted_rows: dict[tuple[Any, ...], list[float]] = field(default_factory=dict)

    def is_forward_auth(self, host: str) -> bool:
        """Whether a request's Host (port ignored) is the forward-auth host."""
        if not self.forward_auth_host:
            return False
        name = host[: host.find("]") + 1] if host.startswith("[") else host.partition(":")[0]
        return name.rstrip(".") == self.forward_auth_host

    def lookup(self, host: str, path: str) -> tuple[RoutePlan | None, bool]:
        """(first matching route plan, whether the host is known at all)."""
        plans = self.by_host.get(host)
        if plans is None:
            plans = self.by_host.get(normalise_host(host))
            if plans is None:
                return None, False
        tcp = None
        for plan in plans:
            if plan.matches(path):
                if not plan.tcp:
                    return plan, True
                tcp = tcp or plan
        return tcp, True  # only a TCP route: the caller says to use CONNECT

    def lookup_tcp(self, authority: str) -> tuple[RoutePlan | None, bool]:
        """(the tcp+https route of ``host:port``, whether the authority is known)."""
        plans = self.by_host.get(authority)
        if plans is None:
            return None, False
        for plan in plans:
            if plan.tcp:
                return plan, True
        return None, True


def _state_key(route: Route) -> tuple[Any, ...]:
    return (route.to, route.lb_policy, route.least_request_lb_config, route.ring_hash_lb_config,
            route.maglev_lb_config)


def _lb_config(route: Route) -> object | None:
    return {"LEAST_REQUEST": route.least_request_lb_config,
            "RING_HASH": route.ring_hash_lb_config,
            "MAGLEV": route.maglev_lb_config}.get(route.lb_policy)


def build_plan(snapshot: Snapshot, previous: Plan | None = None) -> Plan:
    """Compile ``snapshot``; reuse host state of ``previous`` where upstreams are unchanged."""
    options = snapshot.options
    global_headers = dict(options.set_response_headers)
    reused = previous.state_key if previous is not None else {}
    state: dict[tuple[Any, ...], tuple[tuple[UpstreamHost, ...], Balancer | None]] = {}
    policies: dict[tuple[bytes, bytes | None], ClientCertPolicy] = {}
    material = snapshot.material
    plans: list[RoutePlan] = []
    by_host: dict[str, list[RoutePlan]] = {}
    for route in snapshot.routes:
        key = _state_key(route)
        if key in state:
            hosts, balancer = state[key]
        elif key in reused:
            hosts, balancer = reused[key]
        else:
            hosts = hosts_for(route.to)
            balancer = make_balancer(route.lb_policy, hosts, _lb_config(route)) if hosts else None
        state[key] = (hosts, balancer)
        # Header names are case-insensitive: a route's X-Frame-Options replaces the
        # global x-frame-options whatever the spelling.
        by_name = {k.lower(): (k, v) for k, v in global_headers.items()}
        by_name.update({k.lower(): (k, v) for k, v in route.set_response_headers.items()})
        merged = dict(by_name.values())
        set_request = _encode(route.set_request_headers)
        tls = None
        if any(u.scheme == "https" for u in route.to):
            tls = TLSClientConfig(route.tls_server_name, route.tls_skip_verify,
                                  route.tls_custom_ca, route.tls_client_cert,
                                  route.tls_client_key)
        ca = route.tls_downstream_client_ca or material.client_ca
        client_cert = None
        if ca:
            key = (ca, material.client_crl)
            client_cert = policies.get(key) or policies.setdefault(
                key, ClientCertPolicy.build(ca, material.client_crl))
        plan = RoutePlan(
            route=route,
            hosts=hosts,
            balancer=balancer,
            response_headers=_encode(merged),
            # x-request-id: the response carries the gateway's, not the upstream's
            response_header_names=frozenset(k.lower().encode("latin-1") for k in merged)
            | _REQUEST_ID,
            request_headers=set_request,
            request_drop=frozenset(
                [h.lower().encode("latin-1") for h in route.remove_request_headers]
                + [name.lower() for name, _ in set_request]
                # Claim headers are the gateway's, whatever their configured names:
                # a client's copy never reaches an upstream, on any route.
                + [h.lower().encode("latin-1") for h in options.jwt_claims_headers]
                # Path- and method-override headers would have the upstream serve what
                # was never authorized, unless the route trusts its clients with one.
                + [h.encode("latin-1") for h in OVERRIDE_HEADERS
                   if h not in route.preserve_request_headers]
            ) | _REQUEST_ID,  # the upstream gets the request's id, checked (wire/request_id.py)
            response_rewrites=tuple(
                (r.header.lower().encode("latin-1"), r.prefix.encode("latin-1"),
                 r.value.encode("latin-1"))
                for r in route.rewrite_response_headers
            ),
            tls=tls,
            public=route.allow_public_unauthenticated_access,
            timeout=route.timeout,
            host_header_name=route.host_rewrite_header.lower().encode("latin-1"),
            hashed=route.lb_policy in ("RING_HASH", "MAGLEV"),
            client_cert=client_cert,
            tcp=route.tcp,
            metric_labels=(route_host_label(route), route_label(route)),
            mcp=route.mcp,
            mcp_sessions=None if route.mcp is None or route.allow_public_unauthenticated_access
            else SessionIds(material.shared_secret, _route_identity(route)),
            response_timeout=route.timeout if route.mcp is None
            else _stream_timeout(route.timeout, options.timeout_idle),
        )
        plans.append(plan)
        for host_key in route_host_keys(route):
            by_host.setdefault(host_key, []).append(plan)
    return Plan(
        snapshot=snapshot,
        by_host={k: tuple(v) for k, v in by_host.items()},
        routes=tuple(plans),
        response_headers=_encode(global_headers),
        state_key=state,
        forward_auth_host=_forward_auth_host(options.forward_auth_url),
    )


def _route_identity(route: Route) -> str:
    """What tells a route from the others in every process of one configuration."""
    return "\n".join((route.from_url, route.path, route.prefix, route.regex))


def _stream_timeout(route_timeout: float, idle: float) -> float:
    """An MCP route's silence bound: its event streams stay open for a long tool call
    or, for a change stream, indefinitely, and are cut only when the upstream is silent
    for longer than the server's idle timeout (``timeout_idle``; 0: never), or the
    route's ``timeout`` when that is longer."""
    if not idle:
        return float("inf")
    return max(route_timeout, idle)


def _forward_auth_host(url: str) -> str:
    if not url:
        return ""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    return f"[{host}]" if ":" in host else host
