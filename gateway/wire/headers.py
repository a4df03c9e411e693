"""Header rules of the proxy, as plain functions over ``(name, value)`` byte pairs.

Hop-by-hop headers are removed here and nowhere else. Names are compared in lower
case; the original spelling is kept when forwarding.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

HeaderList = list[tuple[bytes, bytes]]

HOP_BY_HOP = frozenset(
    {
        b"connection", b"keep-alive", b"proxy-connection", b"proxy-authenticate",
        b"proxy-authorization", b"te", b"trailer", b"transfer-encoding", b"upgrade",
    }
)
IDENTITY_PREFIX = b"x-gateway-"
# Headers the gateway itself sets or frames the request with: a client header that reads
# as one of these once "_" is read as "-" is never forwarded (see ``underscore_twin``).
GATEWAY_SET = HOP_BY_HOP | frozenset(
    {b"host", b"content-length", b"forwarded", b"x-forwarded-for", b"x-forwarded-proto",
     b"x-forwarded-host"}
)


# A header name as peers send it -> (its lower case, whether a request header is
# forwarded as it is unless a route names it: no identity prefix, no "_"). Clients and
# upstreams send the same few dozen names in the same spelling on every message; looking
# one up costs a third of lower-casing and testing it. Bounded in count and length: junk
# names are worked out each time.
NAME_INFO: dict[bytes, tuple[bytes, bool]] = {}
_NAME_INFO_MAX = 2048
_NAME_INFO_LONGEST = 64


def learn_name(name: bytes) -> tuple[bytes, bool]:
    """``NAME_INFO[name]``, worked out (and kept, within the bounds) on a miss."""
    low = name.lower()
    info = (low, not (low.startswith(IDENTITY_PREFIX) or b"_" in low))
    if len(NAME_INFO) < _NAME_INFO_MAX and len(name) <= _NAME_INFO_LONGEST:
        NAME_INFO[name] = info
    return info


_NO_TOKENS: frozenset[bytes] = frozenset()


def connection_tokens(values: Sequence[bytes]) -> frozenset[bytes]:
    """Header names listed in the ``Connection`` header values ``values`` (they are
    hop-by-hop too, RFC 9110 7.6.1)."""
    if len(values) == 1:
        return named_tokens(values[0])
    if not values:
        return _NO_TOKENS
    return frozenset().union(*map(named_tokens, values))


def named_tokens(value: bytes) -> frozenset[bytes]:
    """The lower-case tokens of one ``Connection`` value. Short values are cached: peers
    send the same few (``keep-alive``, ``close``, ``upgrade``) on every message, and a
    long one cannot fill the cache."""
    return _short_tokens(value) if len(value) <= 64 else _tokens(value)


def _tokens(value: bytes) -> frozenset[bytes]:
    return frozenset(t.strip().lower() for t in value.split(b",") if t.strip())


_short_tokens = lru_cache(256)(_tokens)


def underscore_twin(low: bytes, removed: frozenset[bytes], extra: frozenset[bytes]) -> bool:
    """Whether the lower-case header name ``low`` (which has a ``_``) reads as a header the
    gateway reserves once ``_`` is read as ``-``.

    CGI, WSGI, PHP and many frameworks fold both into one name, so a client's
    ``X_Gateway_Jwt_Assertion`` could shadow the gateway's ``X-Gateway-Jwt-Assertion``.
    Reserved: the identity prefix, the headers the gateway sets (``GATEWAY_SET``), and the
    route's ``removed`` names (``remove_request_headers``, ``set_request_headers``, the
    claim headers) and the decision's ``extra`` removals.
    """
    folded = low.replace(b"_", b"-")
    return (folded.startswith(IDENTITY_PREFIX) or folded in GATEWAY_SET
            or folded in removed or folded in extra)


def trusted_hop(incoming: bytes | None, trusted_hops: int) -> str | None:
    """The Nth address from the right of ``X-Forwarded-For`` (``xff_num_trusted_hops`` N:
    the proxies in front appended one each), or None when it holds fewer than N."""
    if not incoming:
        return None
    chain = [part.strip() for part in incoming.decode("latin-1").split(",") if part.strip()]
    return chain[-trusted_hops] if len(chain) >= trusted_hops else None


def forwarded_for(
    incoming: bytes | None, remote_ip: str, trusted_hops: int, skip_append: bool
) -> tuple[bytes | None, str]:
    """The outgoing ``X-Forwarded-For`` and the client address to trust.

    With ``xff_num_trusted_hops`` N > 0 the client is the Nth address from the right of
    the incoming header (the proxies in front appended one each); otherwise the peer.
    """
    client = remote_ip
    if trusted_hops:
        client = trusted_hop(incoming, trusted_hops) or remote_ip
    if skip_append:
        return incoming, client
    ip = remote_ip.encode()
    return (incoming + b", " + ip if incoming else ip), client


def rewrite_prefix(value: bytes, prefix: bytes, replacement: bytes) -> bytes:
    """``rewrite_response_headers``: a leading ``prefix`` becomes ``replacement``."""
    if value.startswith(prefix):
        return replacement + value[len(prefix):]
    return value
