"""Where a client's authorization codes may be sent.

Two checks. ``listing_problem``: whether a URI may be listed at all, in a metadata
document or a registration (a document or registration listing one bad URI is refused
whole). ``request_problem``: whether an authorization request's ``redirect_uri`` is one of
the client's (RFC 9700 and MCP: an exact string match), and still allowed.

The schemes (MCP: "All redirect URIs MUST be either localhost or use HTTPS"; RFC 8252 for
native apps):
- ``https``, with a host;
- ``http`` only on a loopback host (``localhost``, 127.0.0.0/8, ``[::1]``): the code never
  leaves the machine. RFC 8252 7.3 makes the port of a loopback redirect free (a native
  app takes whatever port it gets), so a request may name another port than the one
  listed, everything else equal;
- a private-use scheme (``com.example.app:/cb``, ``cursor://...``) when the client lists
  it: only the app that registered the scheme with its OS receives it;
- never a scheme a browser runs or reads locally (``javascript:``, ``data:``, ``file:``,
  ``vbscript:``, ``blob:``, ...), whatever is listed.
No URI may carry a fragment (RFC 6749 3.1.2) or user information (``https://a@b/``
shows one host and goes to another).
"""

from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

from gateway.config.values import is_loopback_host

MAX_LENGTH = 2000
NEVER = frozenset({"javascript", "data", "file", "vbscript", "blob", "about", "filesystem",
                   "view-source", "jar", "ws", "wss"})
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# printable ASCII without space, backslash and the characters RFC 3986 never allows
_ALLOWED = re.compile(r"^[!#-\[\]-~]+$")


def _parts(uri: str) -> tuple[str, SplitResult | None, str | None]:
    """(lower-cased scheme, parts, why the URI cannot be used)."""
    if not isinstance(uri, str) or not uri:
        return "", None, "is empty or not a string"
    if len(uri) > MAX_LENGTH:
        return "", None, f"is longer than {MAX_LENGTH} characters"
    if not _ALLOWED.match(uri):
        return "", None, ("holds a space, a backslash, a control or a non-ASCII character "
                          "(percent-encode it)")
    match = _SCHEME.match(uri)
    if match is None:
        return "", None, "is not an absolute URI (it needs a scheme)"
    scheme = match.group(1).lower()
    if "#" in uri:
        return scheme, None, "has a fragment (#...), which a redirect URI may not have"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        return scheme, None, f"cannot be parsed: {exc}"
    if "@" in parts.netloc:
        return scheme, None, "has user information (user@host), which hides the real host"
    return scheme, parts, None


def listing_problem(uri: str) -> str | None:
    """Why ``uri`` may not be one of a client's redirect URIs, or None."""
    scheme, parts, problem = _parts(uri)
    if problem is not None or parts is None:
        return problem
    if scheme in NEVER:
        return f"uses the scheme {scheme}:, which is never a redirect target"
    if scheme == "https":
        if not parts.hostname:
            return "has no host"
        return None
    if scheme == "http":
        if not parts.hostname or not is_loopback_host(parts.hostname):
            return ("uses http on a host other than a loopback one (localhost, 127.0.0.1, "
                    "[::1]); use https")
        return None
    return None  # a private-use scheme, allowed because the client lists it


def _loopback_http(parts: SplitResult | None) -> bool:
    return (parts is not None and parts.scheme == "http" and bool(parts.hostname)
            and is_loopback_host(parts.hostname or ""))


def _without_port(parts: SplitResult) -> tuple[str, str, str, str]:
    return (parts.scheme, parts.hostname or "", parts.path, parts.query)


def request_problem(listed: tuple[str, ...], uri: str) -> str | None:
    """Why an authorization request's ``redirect_uri`` may not receive the client's code,
    or None: it must be allowed (``listing_problem``) and one of ``listed`` exactly, or
    for loopback http the same as one but for the port."""
    problem = listing_problem(uri)
    if problem is not None:
        return f"the redirect_uri {problem}"
    if uri in listed:
        return None
    _, parts, _ = _parts(uri)
    if _loopback_http(parts) and parts is not None:
        wanted = _without_port(parts)
        for candidate in listed:
            _, other, _ = _parts(candidate)
            if _loopback_http(other) and other is not None and _without_port(other) == wanted:
                return None
    return "the redirect_uri is not one of the client's redirect URIs"
