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

On an MCP route the request's JSON-RPC messages go with it (their method, name, argument
hash; never the arguments), and each decision comes back with its verdict on each
message, matched to the messages by their order.

A route key names a route by what an operator wrote (``from`` and its path matcher), so
that a proxy and an authorize whose policies differ find out and say which two routes
they matched, instead of deciding one route's request by another route's rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from gateway.authorize.hook import Allow, Decision, Reply, RequestInfo
from gateway.config.routes import Route
from gateway.mcp.messages import McpCall, McpRequest, McpVerdict
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
    message = pb.CheckRequest(method=request.method, scheme=request.scheme,
                              host=request.host, path=request.path, query=request.query,
                              client_ip=request.client_ip, headers=headers, route_key=key,
                              connect=connect, client_cert=request.client_cert)
    if request.mcp is not None:
        message.mcp.CopyFrom(_mcp_to_pb(request.mcp))
    return message


def _mcp_to_pb(request: McpRequest) -> pb.McpMessages:
    return pb.McpMessages(batch=request.batch, protocol_version=request.protocol_version,
                          messages=[pb.McpMessage(
                              id_json=json.dumps(c.id) if c.id is not None else "",
                              method=c.method, name=c.name,
                              arguments_sha256=c.arguments_sha256,
                              protocol_version=c.protocol_version)
                              for c in request.calls])


def _mcp_from_pb(message: pb.McpMessages) -> McpRequest:
    return McpRequest(tuple(McpCall(_id_of(m.id_json), m.method, m.name, m.arguments_sha256,
                                    m.protocol_version) for m in message.messages),
                      message.batch, message.protocol_version)


def _id_of(text: str) -> str | int | None:
    """A message id from its JSON text (a string or an integer; anything else, as a
    peer that is not ours might send, is no id)."""
    if not text:
        return None
    value = json.loads(text)
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


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
                       message.client_ip, message.client_cert,
                       _mcp_from_pb(message.mcp) if message.HasField("mcp") else None)


def _pairs(headers: Iterable[pb.Header]) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((h.name, h.value) for h in headers)


def decision_to_pb(decision: Decision, key: str, kid: str = "") -> pb.CheckResponse:
    """``kid``: the key id authorize signs with (signing_check), "" for none."""
    verdicts = [pb.McpVerdict(allowed=v.allowed, rule=v.rule, reasons=list(v.reasons))
                for v in decision.mcp]
    if isinstance(decision, Allow):
        return pb.CheckResponse(route_key=key, signing_kid=kid, allow=pb.Allowed(
            headers=[pb.Header(name=n, value=v) for n, v in decision.headers],
            remove=sorted(decision.remove), strip_cookie=decision.strip_cookie,
            mcp=verdicts))
    return pb.CheckResponse(route_key=key, signing_kid=kid, deny=pb.Denied(
        status=decision.status, body=decision.body, reason=decision.reason,
        headers=[pb.Header(name=n, value=v) for n, v in decision.headers], mcp=verdicts))


def decision_from_pb(message: pb.CheckResponse, mcp: McpRequest | None = None
                     ) -> Decision | None:
    """The decision, or None when the answer carries none (a route mismatch). ``mcp``:
    the MCP messages the request carried, whose verdicts the answer holds in their
    order (none when their number is not theirs: the data plane then refuses)."""
    kind = message.WhichOneof("outcome")
    if kind == "allow":
        a = message.allow
        return Allow(_pairs(a.headers), frozenset(a.remove), a.strip_cookie,
                     mcp=_verdicts(a.mcp, mcp))
    if kind == "deny":
        d = message.deny
        return Reply(d.status, d.body, _pairs(d.headers), d.reason, mcp=_verdicts(d.mcp, mcp))
    return None


def _verdicts(found: Sequence[pb.McpVerdict], mcp: McpRequest | None
              ) -> tuple[McpVerdict, ...]:
    if mcp is None or len(found) != len(mcp.calls):
        return ()
    return tuple(McpVerdict(call, v.allowed, v.rule, tuple(v.reasons))
                 for call, v in zip(mcp.calls, found, strict=True))
