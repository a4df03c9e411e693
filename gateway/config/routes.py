"""The policy: a list of routes, validated and compiled once per snapshot.

``parse_policy`` turns raw route mappings into frozen ``Route`` objects holding parsed
URLs, compiled RE2 matchers and loaded TLS material, so a request never re-reads
configuration. Messages the reference spells out are reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import re2

from gateway.config.errors import Problems, did_you_mean
from gateway.config.material import Reader
from gateway.config.route_parts import (
    HeaderRewrite,
    Redirect,
    pair,
    parse_claims,
    parse_header_rewrites,
    parse_redirect,
    parse_route_lb,
    parse_route_tls,
)
from gateway.config.route_policy import parse_route_policy
from gateway.config.ssh import (
    SSH_ROUTE_FIELDS,
    SshRoute,
    parse_ssh_route,
    reject_http_fields,
    ssh_only_fields,
)
from gateway.config.upstreams import (
    HealthCheck,
    LeastRequestConfig,
    MaglevConfig,
    OutlierDetection,
    RingHashConfig,
    Upstream,
    parse_to,
)
from gateway.config.values import parse_bool, parse_duration, parse_list, parse_map, split_url
from gateway.policy import Document, Policy, route_policy

ROUTE_FIELDS: dict[str, str] = {
    "from": "External URL (https:// or tcp+https://host:port), no path.",
    "to": "Upstream URL or list of URLs (http, https, tcp), each optionally ',<weight>'.",
    "redirect": "Redirect instead of proxying (see redirect fields).",
    "path": "Match only this exact path.",
    "prefix": "Match only paths beginning with this prefix.",
    "regex": "Match only paths fully matching this RE2 expression.",
    "prefix_rewrite": "Replace the matched prefix when forwarding.",
    "regex_rewrite_pattern": "RE2 pattern rewriting the upstream path.",
    "regex_rewrite_substitution": "Substitution for regex_rewrite_pattern (\\1 references).",
    "preserve_host_header": "Pass the incoming Host header upstream.",
    "host_rewrite": "Literal Host sent upstream.",
    "host_rewrite_header": "Send the value of this incoming header as Host.",
    "host_path_regex_rewrite_pattern": "RE2 pattern on the path giving the upstream Host.",
    "host_path_regex_rewrite_substitution": "Substitution for host_path_regex_rewrite_pattern.",
    "allowed_domains": "E-mail domains allowed.",
    "allowed_groups": "Groups (ID or name) allowed.",
    "allowed_users": "Users (e-mail or user ID) allowed.",
    "allowed_idp_claims": "Claim name -> allowed values.",
    "allow_public_unauthenticated_access": "Let everyone in, unauthenticated.",
    "allow_any_authenticated_user": "Let in anyone who signs in.",
    "cors_allow_preflight": "Let CORS preflight OPTIONS requests in unauthenticated.",
    "policy": "Allow and deny rules in Pomerium's policy language (PPL); the allow fields "
              "are allow rules beside them.",
    "timeout": "Upstream timeout of this route (default: default_upstream_timeout); for "
               "a tcp+https route, the tunnel's idle timeout (default: none).",
    "set_request_headers": "Headers set on requests sent upstream.",
    "remove_request_headers": "Headers removed from requests sent upstream.",
    "preserve_request_headers": "Path- and method-override headers passed from clients "
                                "(removed by default; beyond the reference).",
    "set_response_headers": "Response headers; win over the global set_response_headers.",
    "rewrite_response_headers": "List of {header, prefix, value} response header rewrites.",
    "pass_identity_headers": "Send X-Gateway-Jwt-Assertion and claim headers upstream.",
    "identity_providers": "Ids of the identity providers this route accepts (default: every "
                          "interactive one; beyond the reference).",
    "pass_bearer_token": "Send the caller's bearer token upstream (default: removed; beyond "
                         "the reference).",
    "allow_spdy": "Allow SPDY upgrades.",
    "allow_websockets": "Allow websocket upgrades (route timeout only).",
    "tls_skip_verify": "Do not verify the upstream certificate (testing only).",
    "tls_server_name": "Name verified in the upstream certificate.",
    "tls_custom_ca": "CA bundle (base64 PEM) replacing the system roots for this upstream.",
    "tls_custom_ca_file": "File form of tls_custom_ca.",
    "tls_downstream_client_ca": "CA (base64 PEM) required of clients on this route.",
    "tls_downstream_client_ca_file": "File form of tls_downstream_client_ca.",
    "tls_client_cert": "Client certificate (base64 PEM) presented upstream.",
    "tls_client_key": "Key (base64 PEM) of tls_client_cert.",
    "tls_client_cert_file": "File form of tls_client_cert.",
    "tls_client_key_file": "File form of tls_client_key.",
    "name": "Cluster name used in metrics.",
    "lb_policy": "ROUND_ROBIN, LEAST_REQUEST, RING_HASH, RANDOM or MAGLEV.",
    "least_request_lb_config": "{choice_count}.",
    "ring_hash_lb_config": "{minimum_ring_size, maximum_ring_size, hash_function}.",
    "maglev_lb_config": "{table_size} (prime).",
    "health_checks": "List of {timeout, interval, thresholds, one of http/tcp/grpc_health_check}.",
    "outlier_detection": "{consecutive_5xx, interval, base_ejection_time, max_ejection_percent}.",
    "orchestrator_service_account_token": "Bearer token toward a cluster orchestrator API.",
    "orchestrator_service_account_token_file": "File form of the orchestrator token.",
    **SSH_ROUTE_FIELDS,
}
# Request headers that make an upstream framework serve another path or method than the
# one the gateway authorized: Symfony, Laminas/Zend and IIS URL Rewrite serve the path
# of the first three, many frameworks execute the method of the others. Removed before
# forwarding (their "_" twins too: ``underscore_twin``) unless a route preserves one.
OVERRIDE_HEADERS = (
    "x-original-url", "x-rewrite-url", "x-original-uri",
    "x-http-method-override", "x-http-method", "x-method-override",
)
_ALLOW_LISTS = ("allowed_domains", "allowed_groups", "allowed_users", "allowed_idp_claims")
_BOOLS = (
    "preserve_host_header", "allow_public_unauthenticated_access", "allow_any_authenticated_user",
    "cors_allow_preflight", "pass_identity_headers", "allow_spdy", "allow_websockets",
    "tls_skip_verify", "pass_bearer_token",
)


@dataclass(frozen=True, slots=True)
class Route:
    """One compiled route. Unset strings are ``""``; unset rewrites are ``None``."""

    index: int
    from_url: str
    scheme: str
    host: str
    port: int | None
    to: tuple[Upstream, ...] = ()
    redirect: Redirect | None = None
    path: str = ""
    prefix: str = ""
    regex: str = ""
    prefix_rewrite: str | None = None
    regex_rewrite_pattern: str = ""
    regex_rewrite_substitution: str = ""
    preserve_host_header: bool = False
    host_rewrite: str = ""
    host_rewrite_header: str = ""
    host_path_regex_rewrite_pattern: str = ""
    host_path_regex_rewrite_substitution: str = ""
    allowed_domains: tuple[str, ...] = ()
    allowed_groups: tuple[str, ...] = ()
    allowed_users: tuple[str, ...] = ()
    allowed_idp_claims: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    allow_public_unauthenticated_access: bool = False
    allow_any_authenticated_user: bool = False
    cors_allow_preflight: bool = False
    timeout: float = 30.0
    set_request_headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    remove_request_headers: tuple[str, ...] = ()
    preserve_request_headers: tuple[str, ...] = ()  # lower case, of OVERRIDE_HEADERS
    set_response_headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    rewrite_response_headers: tuple[HeaderRewrite, ...] = ()
    pass_identity_headers: bool = False
    # ids of ``identity_providers`` whose sessions (and tokens) this route accepts; ():
    # every interactive provider (``validate`` checks each id against the providers)
    identity_providers: tuple[str, ...] = ()
    pass_bearer_token: bool = False
    allow_spdy: bool = False
    allow_websockets: bool = False
    tls_skip_verify: bool = False
    tls_server_name: str = ""
    tls_custom_ca: bytes | None = None
    tls_downstream_client_ca: bytes | None = None
    tls_client_cert: bytes | None = None
    tls_client_key: bytes | None = None
    name: str = ""
    lb_policy: str = "ROUND_ROBIN"
    least_request_lb_config: LeastRequestConfig | None = None
    ring_hash_lb_config: RingHashConfig | None = None
    maglev_lb_config: MaglevConfig | None = None
    health_checks: tuple[HealthCheck, ...] = ()
    outlier_detection: OutlierDetection | None = None
    orchestrator_service_account_token: str = ""
    ssh: SshRoute | None = None  # an ssh:// route's server and SSH settings
    path_regex: Any = field(default=None, compare=False, repr=False)
    rewrite_regex: Any = field(default=None, compare=False, repr=False)
    host_path_regex: Any = field(default=None, compare=False, repr=False)
    policy_document: Document | None = None  # the ``policy`` field, parsed
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


def _compile(pattern: str, path: str, problems: Problems) -> Any:
    try:
        return re2.compile(pattern)
    except re2.error as exc:
        problems.error(path, f"invalid RE2 regular expression {pattern!r}: {exc}")
        return None


def _parse_route(
    index: int, item: object, reader: Reader, problems: Problems, default_timeout: float
) -> Route | None:
    base = f"policy[{index}]"
    if not isinstance(item, Mapping):
        problems.error(base, f"a route must be an object, got {item!r}")
        return None
    for key in item:
        if key not in ROUTE_FIELDS:
            problems.warn(f"{base}.{key}", "unknown route field (ignored)"
                          + did_you_mean(key, ROUTE_FIELDS))
    errors_before = len(problems.errors)
    values: dict[str, Any] = {}

    # from
    from_url = item.get("from")
    scheme, host, port = "", "", None
    if not isinstance(from_url, str):
        problems.error(f"{base}.from", "config: policy bad source url url cannot be empty")
        from_url = ""
    else:
        try:
            parts = split_url(from_url)
        except ValueError as exc:
            problems.error(f"{base}.from", f"config: policy bad source url {exc}")
        else:
            scheme, host, port = parts.scheme.lower(), (parts.hostname or "").lower(), parts.port
            if scheme not in ("https", "http", "tcp+https", "ssh"):
                problems.error(
                    f"{base}.from",
                    f"config: policy bad source url {from_url}: scheme must be https, http "
                    "(behind a TLS-terminating ingress), tcp+https (TCP routes) or ssh "
                    "(native SSH routes)",
                )
            if scheme in ("http", "https") and parts.path not in ("", "/"):
                problems.error(
                    f"{base}.from",
                    f"config: policy source url ({from_url}) contains a path, but it should be "
                    "set using the path field instead",
                )
            if parts.query or parts.fragment or parts.username or parts.password:
                problems.error(
                    f"{base}.from",
                    f"config: policy source url ({from_url}) must be scheme://host[:port] only "
                    "(no query, fragment or credentials)",
                )
            if scheme == "tcp+https" and port is None:
                problems.error(
                    f"{base}.from",
                    f"{from_url}: a tcp+https route needs the port of the TCP service, "
                    "e.g. tcp+https://db.example.com:5432",
                )

    if scheme == "ssh":
        reject_http_fields(item, base, problems)
        values["ssh"] = parse_ssh_route(item, base, host, problems, reader)
    else:
        ssh_only_fields(item, base, problems)
    # to / redirect
    has_to, has_redirect = "to" in item and item["to"] is not None, item.get("redirect") is not None
    if not has_to and not has_redirect:
        problems.error(base, "policy should have either `to` or `redirect` defined")
    elif has_to and has_redirect:
        problems.error(base, "policy should have either `to` or `redirect` defined, not both")
    if has_to and scheme != "ssh":
        values["to"] = parse_to(item["to"], scheme == "tcp+https", f"{base}.to", problems)
    if has_redirect:
        values["redirect"] = parse_redirect(item["redirect"], f"{base}.redirect", problems)
        if scheme == "tcp+https":
            problems.error(f"{base}.redirect", "a tcp+https route cannot redirect")

    # strings
    for key in ("path", "prefix", "regex", "regex_rewrite_pattern", "regex_rewrite_substitution",
                "host_rewrite", "host_rewrite_header", "host_path_regex_rewrite_pattern",
                "host_path_regex_rewrite_substitution", "tls_server_name", "name",
                "orchestrator_service_account_token"):
        if key in item and item[key] is not None:
            if isinstance(item[key], Mapping | list | tuple):
                problems.error(f"{base}.{key}", f"must be a string, got {item[key]!r}")
            else:
                values[key] = str(item[key])
    if "prefix_rewrite" in item and item["prefix_rewrite"] is not None:
        values["prefix_rewrite"] = str(item["prefix_rewrite"])
    for key in ("path", "prefix"):
        if values.get(key) and not values[key].startswith("/"):
            problems.error(f"{base}.{key}", f"must start with '/', got {values[key]!r}")
        elif values.get(key) and (";" in values[key] or "%3b" in values[key].lower()):
            # routes see the path without its ";" parameters (path_with_parameters_action)
            problems.error(f"{base}.{key}", f"{values[key]!r} can never match: requests are "
                           "routed on their path without ';' parameters")
    matchers = [k for k in ("path", "prefix", "regex") if values.get(k)]
    if len(matchers) > 1:
        problems.error(base, f"set only one of path, prefix and regex (got {', '.join(matchers)})")
    if values.get("regex"):
        values["path_regex"] = _compile(values["regex"], f"{base}.regex", problems)
    if "prefix_rewrite" in values and values.get("regex_rewrite_pattern"):
        problems.error(
            base,
            "config: only prefix_rewrite or regex_rewrite_pattern can be specified, but not both",
        )
    pair(values, base, "regex_rewrite_pattern", "regex_rewrite_substitution", item, problems)
    if values.get("regex_rewrite_pattern"):
        values["rewrite_regex"] = _compile(
            values["regex_rewrite_pattern"], f"{base}.regex_rewrite_pattern", problems
        )
    pair(values, base, "host_path_regex_rewrite_pattern", "host_path_regex_rewrite_substitution",
          item, problems)
    if values.get("host_path_regex_rewrite_pattern"):
        values["host_path_regex"] = _compile(
            values["host_path_regex_rewrite_pattern"],
            f"{base}.host_path_regex_rewrite_pattern", problems,
        )

    for key in _BOOLS:
        if key in item and item[key] is not None:
            try:
                values[key] = parse_bool(item[key])
            except ValueError as exc:
                problems.error(f"{base}.{key}", str(exc))
    host_ways = [k for k in ("host_rewrite", "host_rewrite_header",
                             "host_path_regex_rewrite_pattern") if values.get(k)]
    if values.get("preserve_host_header"):
        host_ways.insert(0, "preserve_host_header")
    if len(host_ways) > 1:
        problems.error(
            base,
            "host_rewrite, host_rewrite_header, host_path_regex_rewrite_pattern and "
            f"preserve_host_header are mutually exclusive (got {', '.join(host_ways)})",
        )

    # allow lists
    for key in ("allowed_domains", "allowed_groups", "allowed_users", "remove_request_headers",
                "identity_providers"):
        if key in item and item[key] is not None:
            try:
                values[key] = parse_list(item[key])
            except ValueError as exc:
                problems.error(f"{base}.{key}", str(exc))
    if item.get("preserve_request_headers") is not None:
        values["preserve_request_headers"] = _preserved_headers(
            item["preserve_request_headers"], values.get("remove_request_headers", ()),
            f"{base}.preserve_request_headers", problems)
    if "allowed_idp_claims" in item and item["allowed_idp_claims"] is not None:
        values["allowed_idp_claims"] = parse_claims(
            item["allowed_idp_claims"], f"{base}.allowed_idp_claims", problems
        )
    has_lists = any(values.get(k) for k in _ALLOW_LISTS)
    if values.get("allow_public_unauthenticated_access") and has_lists:
        problems.error(base, "config: policy route marked as public but contains whitelists")
    if values.get("allow_any_authenticated_user") and has_lists:
        problems.error(
            base,
            "config: policy route marked accessible for any authenticated user but contains "
            "whitelists",
        )
    if values.get("allow_public_unauthenticated_access") and values.get(
        "allow_any_authenticated_user"
    ):
        problems.error(
            base,
            "allow_public_unauthenticated_access and allow_any_authenticated_user are both set; "
            "a public route needs no authentication, choose one",
        )

    parse_route_policy(item, base, values, problems)

    # headers
    for key in ("set_request_headers", "set_response_headers"):
        if key in item and item[key] is not None:
            try:
                values[key] = MappingProxyType(parse_map(item[key], ":"))
            except ValueError as exc:
                problems.error(f"{base}.{key}", str(exc))
    if "rewrite_response_headers" in item and item["rewrite_response_headers"] is not None:
        values["rewrite_response_headers"] = parse_header_rewrites(
            item["rewrite_response_headers"], f"{base}.rewrite_response_headers", problems
        )

    # timeout (for a TCP route, an idle timeout: none unless set, so that an idle SSH or
    # database session is not cut after the HTTP default)
    values["timeout"] = 0.0 if scheme == "tcp+https" else default_timeout
    if "timeout" in item and item["timeout"] is not None:
        try:
            values["timeout"] = parse_duration(str(item["timeout"]))
        except ValueError as exc:
            problems.error(f"{base}.timeout", str(exc))

    parse_route_tls(item, base, reader, problems, values)
    parse_route_lb(item, base, problems, values)

    token, token_file = (str(item.get("orchestrator_service_account_token") or ""),
                         str(item.get("orchestrator_service_account_token_file") or ""))
    if token and token_file:
        problems.error(
            base,
            "config: specified both `orchestrator_service_account_token_file` and "
            "`orchestrator_service_account_token`",
        )
    elif token_file:
        try:
            values["orchestrator_service_account_token"] = reader.read(token_file).decode().strip()
        except (OSError, UnicodeDecodeError) as exc:
            problems.error(
                f"{base}.orchestrator_service_account_token_file",
                f"config: failed to load orchestrator service account token: {exc}",
            )

    if len(problems.errors) > errors_before:
        return None
    return Route(index=index, from_url=str(from_url), scheme=scheme, host=host, port=port,
                 **values)




def _preserved_headers(value: object, removed: tuple[str, ...], where: str,
                       problems: Problems) -> tuple[str, ...]:
    """``preserve_request_headers``: names of ``OVERRIDE_HEADERS`` only (any other header
    is forwarded anyway, or removed for a reason no route may lift), in lower case."""
    try:
        names = parse_list(value)
    except ValueError as exc:
        problems.error(where, str(exc))
        return ()
    kept: list[str] = []
    gone = {name.lower() for name in removed}
    for name in names:
        low = name.lower()
        if low not in OVERRIDE_HEADERS:
            problems.error(where, f"{name!r} is not a path- or method-override header; only "
                                  f"these can be preserved: {', '.join(OVERRIDE_HEADERS)}")
        elif low in gone:
            problems.error(where, f"{name!r} is also in remove_request_headers; choose one")
        elif low not in kept:
            kept.append(low)
    return tuple(kept)
