"""Pure checks on what requests carry: redirect targets (no open redirects), the
gateway's reserved path, programmatic tokens and their allowed client targets, and
query/form parameters."""

from __future__ import annotations

import re
from urllib.parse import SplitResult, parse_qs, urlsplit

from gateway.authorize.hook import RequestInfo
from gateway.config.values import is_loopback_host

# The gateway's own paths and how long sign-in state lives.
SIGN_IN = "/.gateway/sign_in"
HANDOFF = "/.gateway/callback"
SIGN_OUT = "/.gateway/signout/"
JWKS = "/.well-known/gateway/jwks.json"
PROGRAMMATIC = "/.gateway/api/v1/login"
ROUTES = "/.gateway/routes"  # the routes portal (``account.routes_portal``)
BACKCHANNEL_LOGOUT = "/.gateway/backchannel-logout"  # the providers' (``backchannel``)
STATE_TTL = 600.0
HANDOFF_TTL = 60.0
CSRF_COOKIE = "_gateway_csrf"
# the identity provider this browser chose last (the authenticate host's; a year)
PROVIDER_COOKIE = "_gateway_provider"
# a preference, bounded: a choice made once does not steer sign-ins for a year
PROVIDER_COOKIE_AGE = 30 * 86400
# the chooser page's own links carry it: only a pick made there is remembered
CHOSEN_PARAM = "chosen"
# host, [v6] host, or user@host, then an optional numeric port: what browsers accept
_AUTHORITY = re.compile(r"(?:[^@]*@)?(?:\[[^\[\]]*\]|[^\[\]:]*)(?::[0-9]*)?")


def _split(uri: str) -> SplitResult | None:
    """``urlsplit``, or None for a URI no browser reads as one (such as a port
    that is no number, ``[::1][9``)."""
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        return None
    if not _AUTHORITY.fullmatch(parts.netloc):
        return None
    return parts


def query_params(request: RequestInfo) -> dict[str, str]:
    parsed = parse_qs(request.query.decode("latin-1").lstrip("?"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def form_params(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode("latin-1")).items()}


def safe_target(uri: str, allowed_hosts: set[str]) -> bool:
    """No open redirects: http(s), no user info (not even an empty one), no backslashes
    or controls, and a host the gateway serves. ``//evil``, ``/\\evil``,
    ``https://app.example.evil``, ``https://app.example@evil`` and ``javascript:`` are
    all refused."""
    if not uri or "\\" in uri or any(ord(c) < 0x21 or ord(c) == 0x7F for c in uri):
        return False
    parts = _split(uri)
    if parts is None:
        return False
    # any "@": an empty user info ("http://@host/") has no username or password
    if parts.scheme not in ("http", "https") or "@" in parts.netloc:
        return False
    host = (parts.hostname or "").lower()
    netloc = parts.netloc.lower()
    if not host:
        return False  # "https:///evil.example" lands on evil.example in browsers
    return host in allowed_hosts or netloc in allowed_hosts


def allowed_programmatic_target(uri: str, domains: tuple[str, ...]) -> bool:
    """``programmatic_redirect_domain_whitelist``: the host must equal an entry; the
    entry ``localhost`` admits any loopback host. Port ignored."""
    parts = _split(uri)
    if parts is None:
        return False
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or "@" in parts.netloc or not host:
        return False
    if "\\" in uri or any(ord(c) < 0x21 or ord(c) == 0x7F for c in uri):
        return False
    if host in domains:
        return True
    return "localhost" in domains and is_loopback_host(host)
