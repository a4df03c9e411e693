"""What a route's loader does beyond reading each field by its kind: the steps that
involve several fields (the scheme of ``from`` decides how ``to`` and ``timeout`` are
read; matchers, Host rewrites and allow fields exclude each other; TLS material comes
inline or from a file). ``routes._parse_route`` runs ``STEPS`` in order over one
``RouteInput``; each records problems at the key path of the field that caused them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2

from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.route_parts import parse_route_tls
from gateway.config.route_policy import parse_route_policy
from gateway.config.route_schema import UNSET, RouteFieldInfo
from gateway.config.ssh import parse_ssh_route, reject_http_fields, ssh_only_fields
from gateway.config.upstreams import LB_POLICIES, parse_to
from gateway.config.values import parse_list, split_url

# Request headers that make an upstream framework serve another path or method than the
# one the gateway authorized: Symfony, Laminas/Zend and IIS URL Rewrite serve the path
# of the first three, many frameworks execute the method of the others. Removed before
# forwarding (their "_" twins too: ``underscore_twin``) unless a route preserves one.
OVERRIDE_HEADERS = (
    "x-original-url", "x-rewrite-url", "x-original-uri",
    "x-http-method-override", "x-http-method", "x-method-override",
)
_ALLOW_LISTS = ("allowed_domains", "allowed_groups", "allowed_users", "allowed_idp_claims")
_SCHEMES = ("https", "http", "tcp+https", "ssh")
_LB_CONFIGS = (("least_request_lb_config", "LEAST_REQUEST"),
               ("ring_hash_lb_config", "RING_HASH"), ("maglev_lb_config", "MAGLEV"))


@dataclass(slots=True)
class RouteInput:
    """One route while it is read: the raw mapping, where it is, and the ``Route``
    keyword arguments gathered so far (``values``)."""

    item: Mapping[str, Any]
    base: str  # ``policy[3]``
    problems: Problems
    reader: Reader
    default_timeout: float
    values: dict[str, Any] = field(default_factory=dict)
    from_url: str = ""
    scheme: str = ""
    host: str = ""
    port: int | None = None

    def error(self, key: str, message: str) -> None:
        """A problem at field ``key`` of the route (the route itself for "")."""
        self.problems.error(f"{self.base}.{key}" if key else self.base, message)


Schema = Mapping[str, RouteFieldInfo]
Step = Callable[[RouteInput, Schema], None]


def lb_policy(value: object, where: str, problems: Problems) -> str:
    policy = str(value).upper()
    if policy not in LB_POLICIES:
        problems.error(where, f"{value!r} is not one of {', '.join(LB_POLICIES)}")
    return policy


def source(route: RouteInput, schema: Schema) -> None:
    """``from``: the scheme, host and port every other step may depend on."""
    from_url = route.item.get("from")
    if not isinstance(from_url, str):
        route.error("from", "config: policy bad source url url cannot be empty")
        return
    route.from_url = from_url
    try:
        parts = split_url(from_url)
    except ValueError as exc:
        route.error("from", f"config: policy bad source url {exc}")
        return
    route.scheme, route.port = parts.scheme.lower(), parts.port
    route.host = (parts.hostname or "").lower()
    if route.scheme not in _SCHEMES:
        route.error("from", f"config: policy bad source url {from_url}: scheme must be "
                            "https, http (behind a TLS-terminating ingress), tcp+https (TCP "
                            "routes) or ssh (native SSH routes)")
    if route.scheme in ("http", "https") and parts.path not in ("", "/"):
        route.error("from", f"config: policy source url ({from_url}) contains a path, but "
                            "it should be set using the path field instead")
    if parts.query or parts.fragment or parts.username or parts.password:
        route.error("from", f"config: policy source url ({from_url}) must be "
                            "scheme://host[:port] only (no query, fragment or credentials)")
    if route.scheme == "tcp+https" and route.port is None:
        route.error("from", f"{from_url}: a tcp+https route needs the port of the TCP "
                            "service, e.g. tcp+https://db.example.com:5432")


def ssh_or_http(route: RouteInput, schema: Schema) -> None:
    """An ssh:// route reads its SSH fields and refuses HTTP ones; others the reverse."""
    if route.scheme == "ssh":
        reject_http_fields(route.item, route.base, route.problems)
        route.values["ssh"] = parse_ssh_route(route.item, route.base, route.host,
                                              route.problems, route.reader)
    else:
        ssh_only_fields(route.item, route.base, route.problems)


def destination(route: RouteInput, schema: Schema) -> None:
    """Exactly one of ``to`` and ``redirect``; ``to`` as the scheme reads it (an ssh://
    route's is its server, read with the SSH fields)."""
    has_to = route.item.get("to") is not None
    has_redirect = route.item.get("redirect") is not None
    if not has_to and not has_redirect:
        route.error("", "policy should have either `to` or `redirect` defined")
    elif has_to and has_redirect:
        route.error("", "policy should have either `to` or `redirect` defined, not both")
    if has_to and route.scheme != "ssh":
        route.values["to"] = parse_to(route.item["to"], route.scheme == "tcp+https",
                                      f"{route.base}.to", route.problems)
    if has_redirect and route.scheme == "tcp+https":
        route.error("redirect", "a tcp+https route cannot redirect")


def fields_by_kind(route: RouteInput, schema: Schema) -> None:
    """Every field its kind's parser reads alone (``RouteFieldInfo.parse``)."""
    for info in schema.values():
        raw = route.item.get(info.key)
        if info.parse is None or raw is None:
            continue
        value = info.parse(raw, f"{route.base}.{info.key}", route.problems)
        if value is not UNSET:
            route.values[info.attr] = value


def one_matcher(route: RouteInput, schema: Schema) -> None:
    matchers = [k for k in ("path", "prefix", "regex") if route.values.get(k)]
    if len(matchers) > 1:
        route.error("", f"set only one of path, prefix and regex (got {', '.join(matchers)})")


def path_rewrites(route: RouteInput, schema: Schema) -> None:
    """One way to rewrite the path; each pattern with its substitution."""
    values = route.values
    if "prefix_rewrite" in values and values.get("regex_rewrite_pattern"):
        route.error("", "config: only prefix_rewrite or regex_rewrite_pattern can be "
                        "specified, but not both")
    for pattern in ("regex_rewrite_pattern", "host_path_regex_rewrite_pattern"):
        substitution = pattern.replace("_pattern", "_substitution")
        if values.get(pattern) and substitution not in route.item:
            route.error(substitution, f"is required when {pattern} is set")
        if route.item.get(substitution) is not None and not values.get(pattern):
            route.error(pattern, f"is required when {substitution} is set")


def compiled_patterns(route: RouteInput, schema: Schema) -> None:
    """Each RE2 field compiled into its ``compiled`` attribute."""
    for info in schema.values():
        pattern = route.values.get(info.attr) if info.compiled else None
        if not pattern:
            continue
        try:
            route.values[info.compiled] = re2.compile(pattern)
        except re2.error as exc:
            route.error(info.key, f"invalid RE2 regular expression {pattern!r}: {exc}")


def one_host_way(route: RouteInput, schema: Schema) -> None:
    ways = [k for k in ("preserve_host_header", "host_rewrite", "host_rewrite_header",
                        "host_path_regex_rewrite_pattern") if route.values.get(k)]
    if len(ways) > 1:
        route.error("", "host_rewrite, host_rewrite_header, host_path_regex_rewrite_pattern "
                        f"and preserve_host_header are mutually exclusive (got "
                        f"{', '.join(ways)})")


def preserved_headers(route: RouteInput, schema: Schema) -> None:
    """``preserve_request_headers``: names of ``OVERRIDE_HEADERS`` only (any other header
    is forwarded anyway, or removed for a reason no route may lift), in lower case."""
    value = route.item.get("preserve_request_headers")
    if value is None:
        return
    where = "preserve_request_headers"
    try:
        names = parse_list(value)
    except ValueError as exc:
        route.error(where, str(exc))
        return
    kept: list[str] = []
    gone = {name.lower() for name in route.values.get("remove_request_headers", ())}
    for name in names:
        low = name.lower()
        if low not in OVERRIDE_HEADERS:
            route.error(where, f"{name!r} is not a path- or method-override header; only "
                               f"these can be preserved: {', '.join(OVERRIDE_HEADERS)}")
        elif low in gone:
            route.error(where, f"{name!r} is also in remove_request_headers; choose one")
        elif low not in kept:
            kept.append(low)
    route.values[where] = tuple(kept)


def allow_fields(route: RouteInput, schema: Schema) -> None:
    """Public, any signed-in user and allow lists exclude each other."""
    values = route.values
    public = values.get("allow_public_unauthenticated_access")
    anyone = values.get("allow_any_authenticated_user")
    has_lists = any(values.get(k) for k in _ALLOW_LISTS)
    if public and has_lists:
        route.error("", "config: policy route marked as public but contains whitelists")
    if anyone and has_lists:
        route.error("", "config: policy route marked accessible for any authenticated user "
                        "but contains whitelists")
    if public and anyone:
        route.error("", "allow_public_unauthenticated_access and allow_any_authenticated_user "
                        "are both set; a public route needs no authentication, choose one")


def policy_rules(route: RouteInput, schema: Schema) -> None:
    parse_route_policy(route.item, route.base, route.values, route.problems)


def idle_timeout(route: RouteInput, schema: Schema) -> None:
    """A route without ``timeout`` gets ``default_upstream_timeout``; a TCP route's is an
    idle timeout, none unless set, so that an idle SSH or database session is not cut
    after the HTTP default."""
    if "timeout" not in route.values:
        route.values["timeout"] = 0.0 if route.scheme == "tcp+https" else route.default_timeout


def tls_material(route: RouteInput, schema: Schema) -> None:
    parse_route_tls(route.item, route.base, route.reader, route.problems, route.values)


def lb_configs(route: RouteInput, schema: Schema) -> None:
    """A load balancer's settings only with that ``lb_policy``."""
    for key, policy in _LB_CONFIGS:
        if (route.item.get(key) is not None
                and route.values.get("lb_policy", "ROUND_ROBIN") != policy):
            route.error(key, f"only applies with lb_policy: {policy}")


def orchestrator_token(route: RouteInput, schema: Schema) -> None:
    token = str(route.item.get("orchestrator_service_account_token") or "")
    token_file = str(route.item.get("orchestrator_service_account_token_file") or "")
    if token and token_file:
        route.error("", "config: specified both `orchestrator_service_account_token_file` "
                        "and `orchestrator_service_account_token`")
    elif token_file:
        try:
            token = route.reader.read(token_file).decode().strip()
        except (OSError, UnicodeDecodeError) as exc:
            route.error("orchestrator_service_account_token_file",
                        f"config: failed to load orchestrator service account token: {exc}")
        else:
            route.values["orchestrator_service_account_token"] = token


STEPS: tuple[Step, ...] = (
    source, ssh_or_http, destination, fields_by_kind, one_matcher, path_rewrites,
    compiled_patterns, one_host_way, preserved_headers, allow_fields, policy_rules,
    idle_timeout, tls_material, lb_configs, orchestrator_token,
)
