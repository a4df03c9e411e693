"""The policy: a list of routes, validated and compiled once per snapshot.

``parse_policy`` turns raw route mappings into frozen ``Route`` objects holding parsed
URLs, compiled RE2 matchers and loaded TLS material, so a request never re-reads
configuration. ``Route``'s attributes declare the route fields (``route_field``): the
loader, the reference pages and the example's test read that table (``ROUTE_SCHEMA``);
what involves several fields is one small step each (``route_steps``). Messages the
behaviour reference spells out are reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.errors import Problems, did_you_mean
from gateway.config.material import Reader
from gateway.config.mcp import McpRoute, parse_mcp
from gateway.config.route_parts import HeaderRewrite, Redirect
from gateway.config.route_schema import FieldKind, RouteFieldInfo, route_meta, schema_of, text
from gateway.config.route_schema import route_field as _f
from gateway.config.route_steps import OVERRIDE_HEADERS, STEPS, RouteInput, lb_policy
from gateway.config.ssh import SSH_ROUTE_FIELDS, SshRoute
from gateway.config.upstreams import (
    HealthCheck,
    LeastRequestConfig,
    MaglevConfig,
    OutlierDetection,
    RingHashConfig,
    Upstream,
    parse_health_checks,
    parse_least_request,
    parse_maglev,
    parse_outlier_detection,
    parse_ring_hash,
)
from gateway.policy import Document, Policy, route_policy

K = FieldKind


@dataclass(frozen=True, slots=True)
class Route:
    """One compiled route. Unset strings are ``""``; unset rewrites are ``None``.

    Every attribute declared with ``_f`` is a route field (its kind picks the parser);
    adding a field is adding its line here, and a step in ``route_steps`` only when
    it involves other fields."""

    index: int
    from_url: str = field(metadata=route_meta(
        K.URL, "External URL (https:// or tcp+https://host:port), no path.", key="from",
        parse=None))
    scheme: str
    host: str
    port: int | None
    to: tuple[Upstream, ...] = _f((), K.UPSTREAMS, "Upstream URL or list of URLs (http, "
                                  "https, tcp), each optionally ',<weight>'.", parse=None)
    redirect: Redirect | None = _f(None, K.REDIRECT, "Redirect instead of proxying (see "
                                   "redirect fields).")
    path: str = _f("", K.PATH, "Match only this exact path.")
    prefix: str = _f("", K.PATH, "Match only paths beginning with this prefix.")
    regex: str = _f("", K.REGEX, "Match only paths fully matching this RE2 expression.",
                    compiled="path_regex")
    prefix_rewrite: str | None = _f(None, K.STR, "Replace the matched prefix when "
                                    "forwarding.", parse=text)
    regex_rewrite_pattern: str = _f("", K.REGEX, "RE2 pattern rewriting the upstream path.",
                                    compiled="rewrite_regex")
    regex_rewrite_substitution: str = _f("", K.STR, "Substitution for regex_rewrite_pattern "
                                         "(\\1 references).")
    preserve_host_header: bool = _f(False, K.BOOL, "Pass the incoming Host header upstream.")
    host_rewrite: str = _f("", K.STR, "Literal Host sent upstream.")
    host_rewrite_header: str = _f("", K.STR, "Send the value of this incoming header as "
                                  "Host.")
    host_path_regex_rewrite_pattern: str = _f("", K.REGEX, "RE2 pattern on the path giving "
                                              "the upstream Host.", compiled="host_path_regex")
    host_path_regex_rewrite_substitution: str = _f("", K.STR, "Substitution for "
                                                   "host_path_regex_rewrite_pattern.")
    allowed_domains: tuple[str, ...] = _f((), K.LIST, "E-mail domains allowed.")
    allowed_groups: tuple[str, ...] = _f((), K.LIST, "Groups (ID or name) allowed.")
    allowed_users: tuple[str, ...] = _f((), K.LIST, "Users (e-mail or user ID) allowed.")
    allowed_idp_claims: Mapping[str, tuple[str, ...]] = _f({}, K.CLAIMS, "Claim name -> "
                                                           "allowed values.")
    allow_public_unauthenticated_access: bool = _f(False, K.BOOL, "Let everyone in, "
                                                   "unauthenticated.")
    allow_any_authenticated_user: bool = _f(False, K.BOOL, "Let in anyone who signs in.")
    cors_allow_preflight: bool = _f(False, K.BOOL, "Let CORS preflight OPTIONS requests in "
                                    "unauthenticated.")
    policy_document: Document | None = _f(None, K.POLICY, "Allow and deny rules in "
                                          "Pomerium's policy language (PPL); the allow "
                                          "fields are allow rules beside them.",
                                          key="policy", parse=None)
    timeout: float = _f(30.0, K.DURATION, "Upstream timeout of this route (default: "
                        "default_upstream_timeout); for a tcp+https route, the tunnel's "
                        "idle timeout (default: none); on an MCP route (mcp), whose "
                        "responses are long-lived event streams, the upstream may be "
                        "silent for timeout_idle instead when that is longer.")
    set_request_headers: Mapping[str, str] = _f({}, K.HEADERS, "Headers set on requests "
                                                "sent upstream.")
    remove_request_headers: tuple[str, ...] = _f((), K.LIST, "Headers removed from requests "
                                                 "sent upstream.")
    # lower case, of OVERRIDE_HEADERS (route_steps.preserved_headers)
    preserve_request_headers: tuple[str, ...] = _f(
        (), K.LIST, "Path- and method-override headers passed from clients (removed by "
        "default; beyond the reference).", parse=None)
    set_response_headers: Mapping[str, str] = _f({}, K.HEADERS, "Response headers; win over "
                                                 "the global set_response_headers.")
    rewrite_response_headers: tuple[HeaderRewrite, ...] = _f(
        (), K.HEADER_REWRITES, "List of {header, prefix, value} response header rewrites.")
    pass_identity_headers: bool = _f(False, K.BOOL, "Send X-Gateway-Jwt-Assertion and claim "
                                     "headers upstream.")
    # ids of ``identity_providers`` whose sessions (and tokens) this route accepts; ():
    # every interactive provider (``validate`` checks each id against the providers)
    identity_providers: tuple[str, ...] = _f(
        (), K.LIST, "Ids of the identity providers this route accepts (default: every "
        "interactive one; beyond the reference).")
    pass_bearer_token: bool = _f(False, K.BOOL, "Send the caller's bearer token upstream "
                                 "(default: removed; beyond the reference).")
    mcp: McpRoute | None = _f(None, K.OBJECT, "This route serves Model Context Protocol "
                              "clients: {max_request_bytes, max_response_bytes, "
                              "upstream_oauth2} ({} for the "
                              "defaults; beyond the reference).", parse=parse_mcp)
    allow_spdy: bool = _f(False, K.BOOL, "Allow SPDY upgrades.")
    allow_websockets: bool = _f(False, K.BOOL, "Allow websocket upgrades (route timeout "
                                "only).")
    tls_skip_verify: bool = _f(False, K.BOOL, "Do not verify the upstream certificate "
                               "(testing only).")
    tls_server_name: str = _f("", K.STR, "Name verified in the upstream certificate.")
    # TLS material: read with its file form, checked together (route_steps.tls_material)
    tls_custom_ca: bytes | None = _f(None, K.BASE64, "CA bundle (base64 PEM) replacing the "
                                     "system roots for this upstream.", parse=None)
    tls_custom_ca_file: str = _f("", K.FILE, "File form of tls_custom_ca.")
    tls_downstream_client_ca: bytes | None = _f(None, K.BASE64, "CA (base64 PEM) required "
                                                "of clients on this route.", parse=None)
    tls_downstream_client_ca_file: str = _f("", K.FILE, "File form of "
                                            "tls_downstream_client_ca.")
    tls_client_cert: bytes | None = _f(None, K.BASE64, "Client certificate (base64 PEM) "
                                       "presented upstream.", parse=None)
    tls_client_key: bytes | None = _f(None, K.BASE64, "Key (base64 PEM) of tls_client_cert.",
                                      parse=None)
    tls_client_cert_file: str = _f("", K.FILE, "File form of tls_client_cert.")
    tls_client_key_file: str = _f("", K.FILE, "File form of tls_client_key.")
    name: str = _f("", K.STR, "Cluster name used in metrics.")
    lb_policy: str = _f("ROUND_ROBIN", K.ENUM, "ROUND_ROBIN, LEAST_REQUEST, RING_HASH, RANDOM "
                        "or MAGLEV.", parse=lb_policy)
    least_request_lb_config: LeastRequestConfig | None = _f(
        None, K.OBJECT, "{choice_count}.", parse=parse_least_request)
    ring_hash_lb_config: RingHashConfig | None = _f(
        None, K.OBJECT, "{minimum_ring_size, maximum_ring_size, hash_function}.",
        parse=parse_ring_hash)
    maglev_lb_config: MaglevConfig | None = _f(None, K.OBJECT, "{table_size} (prime).",
                                               parse=parse_maglev)
    health_checks: tuple[HealthCheck, ...] = _f(
        (), K.OBJECTS, "List of {timeout, interval, thresholds, one of "
        "http/tcp/grpc_health_check}.", parse=parse_health_checks)
    outlier_detection: OutlierDetection | None = _f(
        None, K.OBJECT, "{consecutive_5xx, interval, base_ejection_time, "
        "max_ejection_percent}.", parse=parse_outlier_detection)
    orchestrator_service_account_token: str = _f("", K.STR, "Bearer token toward a cluster "
                                                 "orchestrator API.")
    orchestrator_service_account_token_file: str = _f("", K.FILE, "File form of the "
                                                      "orchestrator token.")
    # derived: from the SSH fields (SSH_ROUTE_FIELDS), and compiled patterns
    ssh: SshRoute | None = None  # an ssh:// route's server and SSH settings
    path_regex: Any = field(default=None, compare=False, repr=False)
    rewrite_regex: Any = field(default=None, compare=False, repr=False)
    host_path_regex: Any = field(default=None, compare=False, repr=False)
    # who may pass: ``policy_document`` and the allow fields, compiled (``route_policy``)
    policy: Policy = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy", route_policy(self.policy_document, self))

    @property
    def tcp(self) -> bool:
        return self.scheme == "tcp+https"

    @property
    def has_allow_lists(self) -> bool:
        return bool(
            self.allowed_domains or self.allowed_groups or self.allowed_users
            or self.allowed_idp_claims
        )


ROUTE_SCHEMA: dict[str, RouteFieldInfo] = {
    **schema_of(Route),
    **{key: RouteFieldInfo(key, "", K.SSH, doc, None, None)
       for key, doc in SSH_ROUTE_FIELDS.items()},
}
"""Every route field, by the name written in a route, in the reference's order."""
ROUTE_FIELDS: dict[str, str] = {key: info.doc for key, info in ROUTE_SCHEMA.items()}
"""Route field -> its documentation."""


def parse_policy(
    raw: object, reader: Reader, problems: Problems, default_timeout: float
) -> tuple[Route, ...]:
    """Parse the ``policy`` list; every problem is recorded with its ``policy[i]`` path."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.error("policy", f"must be a list of routes, got {type(raw).__name__}")
        return ()
    routes = []
    for index, item in enumerate(raw):
        route = _parse_route(index, item, reader, problems, default_timeout)
        if route is not None:
            routes.append(route)
    return tuple(routes)


def _parse_route(
    index: int, item: object, reader: Reader, problems: Problems, default_timeout: float
) -> Route | None:
    base = f"policy[{index}]"
    if not isinstance(item, Mapping):
        problems.error(base, f"a route must be an object, got {item!r}")
        return None
    for key in item:
        if key not in ROUTE_SCHEMA:
            problems.warn(f"{base}.{key}", "unknown route field (ignored)"
                          + did_you_mean(key, ROUTE_SCHEMA))
    errors_before = len(problems.errors)
    route = RouteInput(item, base, problems, reader, default_timeout)
    for step in STEPS:
        step(route, ROUTE_SCHEMA)
    if len(problems.errors) > errors_before:
        return None
    return Route(index=index, from_url=route.from_url, scheme=route.scheme, host=route.host,
                 port=route.port, **route.values)


__all__ = ["OVERRIDE_HEADERS", "ROUTE_FIELDS", "ROUTE_SCHEMA", "Route", "parse_policy"]
