"""The authorize decision as it crosses the wire: requests, route keys and decisions to
and from their protobuf messages (one place, both ways).

What a proxy sends is the least a decision needs: method, scheme, host, path, query,
client address and only the headers that policy or the answer page read (the gateway's
own session cookie, rebuilt from the Cookie header without the application's cookies;
an ``Authorization: Gateway`` token, or the Authorization headers of a request with a
bearer JWT, maybe an outside issuer's (which authorize verifies); the CORS preflight
headers; ``Accept``, ``X-Requested-With`` and ``X-Request-Id``, which shape the page).
The sealed cookie or token goes as it came: authorize opens it with its own ``cookie_secret`` /
``shared_secret``, so the session a decision is about is never the proxy's say-so.

A route key names a route by what an operator wrote (``from`` and its path matcher), so
that a proxy and an authorize whose policies differ find out and say which two routes
they matched, instead of deciding one route's request by another route's rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.mcp_oauth.tokens import ACCESS_PREFIX
from gateway.rpc.protos import authorize_pb2 as pb
from gateway.sessions.bearer import programmatic_token
from gateway.sessions.cookie import MAX_CHUNKS, parse_cookies

# Headers sent as they are (lower-case names); the cookie and authorization are filtered.
PASSED = frozenset({b"accept", b"x-requested-with", b"x-request-id", b"origin",
                    b"access-control-request-method"})
MAX_PASSED = 16  # of each passed name: a request cannot make the message large


def route_key(route: Route | None) -> str:
    """``from`` and the path matcher: ``https://app.example.com prefix=/admin``."""
    if route is None:
        return ""
    if route.path:
        matcher = f"path={route.path}"
    elif route.prefix:
        matcher = f"prefix={route.prefix}"
    elif route.regex:
        matcher = f"regex={route.regex}"
    else:
        matcher = "any path"
    return f"{route.from_url} {matcher}"


def gateway_cookie(headers: Iterable[tuple[bytes, bytes]], name: str) -> bytes:
    """A Cookie header with only the gateway's cookie (and its ``name_N`` chunks)."""
    jar = parse_cookies(headers)
    wanted = [name, *(f"{name}_{i}" for i in range(1, MAX_CHUNKS + 1))]
    return "; ".join(f"{key}={jar[key]}" for key in wanted if key in jar).encode("latin-1")


_MCP_ACCESS = ACCESS_PREFIX.encode()


def request_to_pb(request: RequestInfo, cookie_name: str, key: str,
                  connect: bool = False) -> pb.CheckRequest:
    headers: list[pb.Header] = []
    counts: dict[bytes, int] = {}
    for name, value in request.headers:
        low = name.lower()
        if low in PASSED and counts.get(low, 0) < MAX_PASSED:
            counts[low] = counts.get(low, 0) + 1
            headers.append(pb.Header(name=low, value=value))
    cookie = gateway_cookie(request.headers, cookie_name)
    if cookie:
        headers.append(pb.Header(name=b"cookie", value=cookie))
    authorization = [v for n, v in request.headers if n.lower() == b"authorization"]
    if any(_outside_jwt(v) for v in authorization):
        # a bearer JWT from an outside issuer: authorize verifies it, and refuses a
        # request that carries more than one Authorization header as the proxy would
        headers.extend(pb.Header(name=b"authorization", value=v)
                       for v in authorization[:MAX_PASSED])
    else:
        token = programmatic_token(request.headers)
        if token:
            headers.append(pb.Header(name=b"authorization",
                                     value=b"Gateway " + token.encode("latin-1")))
    return pb.CheckRequest(method=request.method, scheme=request.scheme, host=request.host,
                           path=request.path, query=request.query,
                           client_ip=request.client_ip, headers=headers, route_key=key,
                           connect=connect, client_cert=request.client_cert)


def _outside_jwt(value: bytes) -> bool:
    """``Bearer <JWT>`` not of the gateway's own (an application's opaque token is not
    sent: only a JWT can be an outside issuer's), or an MCP client's access token, which
    authorize looks up (``gateway.mcp_oauth``)."""
    value = value.strip()
    if value[:7].lower() != b"bearer ":
        return False
    return (value[7:15].lower() != b"gateway-" and value.count(b".") == 2) or \
        value[7:7 + len(_MCP_ACCESS)] == _MCP_ACCESS


def request_from_pb(message: pb.CheckRequest) -> RequestInfo:
    return RequestInfo(message.method, message.scheme, message.host, message.path,
                       message.query, [(h.name, h.value) for h in message.headers],
                       message.client_ip, message.client_cert)


def _pairs(headers: Iterable[pb.Header]) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((h.name, h.value) for h in headers)


def decision_to_pb(decision: Decision, key: str, kid: str = "") -> pb.CheckResponse:
    """``kid``: the key id authorize signs with (signing_check), "" for none."""
    if isinstance(decision, Allow):
        return pb.CheckResponse(route_key=key, signing_kid=kid, allow=pb.Allowed(
            headers=[pb.Header(name=n, value=v) for n, v in decision.headers],
            remove=sorted(decision.remove), strip_cookie=decision.strip_cookie))
    return pb.CheckResponse(route_key=key, signing_kid=kid, deny=pb.Denied(
        status=decision.status, body=decision.body, reason=decision.reason,
        headers=[pb.Header(name=n, value=v) for n, v in decision.headers]))


def decision_from_pb(message: pb.CheckResponse) -> Decision | None:
    """The decision, or None when the answer carries none (a route mismatch)."""
    kind = message.WhichOneof("outcome")
    if kind == "allow":
        a = message.allow
        return Allow(_pairs(a.headers), frozenset(a.remove), a.strip_cookie)
    if kind == "deny":
        d = message.deny
        return Reply(d.status, d.body, _pairs(d.headers), d.reason)
    return None
