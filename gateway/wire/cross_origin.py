"""Whether a browser sent a state-changing request from one of the gateway's own pages:
the check against cross-site request forgery that every form of the gateway passes
(sign-out, the SSH sign-in's Allow; the consent form to come), before and beside its
CSRF token. Plain functions over the request's headers; the caller says which origins
are the gateway's own for the host the request was sent to.

The rule is Go 1.25's ``net/http.CrossOriginProtection``, stricter where the gateway
knows more than a library can:

- ``Sec-Fetch-Site`` (Fetch Metadata: set by the browser, never by a page's script),
  when sent, decides alone. It must be ``same-origin``. ``same-site`` is refused: a site
  is every host under the registrable domain, that is every route's application and
  whatever its users put there, and no form of the gateway is posted from another
  host. ``none`` (a request the person started: a typed address, a bookmark) is refused
  for a form, which is always posted from the page that shows it (Chromium sends
  ``same-origin`` even when a reload posts it again); for a state-changing link
  (``navigation``: the sign-out URL with its token) it is accepted, since opening such
  a link by hand is that. ``Origin`` is not read then: the browser computed both from
  the same page, and the ``Origin`` of a form's POST follows that page's referrer
  policy (``no-referrer`` makes it ``null`` even on the page's own origin: Chromium
  does so; the gateway's pages use ``same-origin``).
- Without ``Sec-Fetch-Site`` (browsers before 2023: Safari up to 16.3, Firefox up to
  89), ``Origin`` decides: it must be one of the own origins, scheme, host and port as
  the client used them. ``Origin: null`` (a sandboxed frame, a ``data:`` page, a post
  redirected from elsewhere, a page with ``no-referrer``) is refused. Go compares the
  Origin's host with ``Host`` alone; the gateway knows its scheme and its public URLs,
  so it compares whole origins (an http page posting to the https gateway is another
  origin).
- With neither (curl, scripts, older browsers) the request goes on and the CSRF token
  alone decides, as it did before.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

SAFE_METHODS = frozenset({b"GET", b"HEAD", b"OPTIONS", b"TRACE"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_SHOWN = 200  # characters of a header value a refusal reports


@dataclass(frozen=True, slots=True)
class CrossOrigin:
    """A refusal: ``why`` in words, and the two headers as sent ("" when absent)."""

    why: str
    sec_fetch_site: str
    origin: str


def origin_of(scheme: str, authority: str) -> str:
    """``scheme://host[:port]`` as origins are compared here: lower case, the name
    without a trailing dot, the scheme's default port left out; "" for no http(s)
    origin (user info, a path, a port that is no number, no host)."""
    scheme = scheme.lower()
    default = _DEFAULT_PORTS.get(scheme)
    if default is None or not authority or any(c in authority for c in "@/?#\\ "):
        return ""
    authority = authority.lower()
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            return ""
        host, rest = authority[:end + 1], authority[end + 1:]
    else:
        host, colon, port = authority.partition(":")
        rest = colon + port
        host = host[:-1] if host.endswith(".") else host  # the name's root dot
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return ""
    if not host or host == "[]":
        return ""
    port = rest[1:].lstrip("0") or ("0" if rest else "")
    return f"{scheme}://{host}" + (f":{port}" if port and port != default else "")


def parse_origin(value: str) -> str:
    """An ``Origin`` header's value as ``origin_of`` writes it; "" when it is none."""
    scheme, sep, authority = value.strip().partition("://")
    return origin_of(scheme, authority) if sep else ""


def cross_origin(headers: list[tuple[bytes, bytes]], own: Collection[str], *,
                 navigation: bool = False) -> CrossOrigin | None:
    """The refusal of a state-changing request whose headers say a browser sent it from
    a page that is not one of ``own`` (origins as ``origin_of`` writes them); None when
    it may go on. ``navigation``: a state-changing GET link rather than a form (``none``
    accepted). Every value of a repeated header must pass; ``Origin`` is read only
    without ``Sec-Fetch-Site``."""
    sites: list[str] = []
    origins: list[str] = []
    for name, raw in headers:
        low = name.lower()
        if low == b"sec-fetch-site":
            sites.append(raw.decode("latin-1").strip())
        elif low == b"origin":
            origins.append(raw.decode("latin-1").strip())
    site, origin = ", ".join(sites)[:_SHOWN], ", ".join(origins)[:_SHOWN]
    accepted = ("same-origin", "none") if navigation else ("same-origin",)
    for value in sites:
        if value.lower() not in accepted:
            return CrossOrigin(f"Sec-Fetch-Site is {value[:_SHOWN]!r}", site, origin)
    if sites:
        return None  # it decides alone (see above: Origin may be null here)
    for value in origins:
        if value.lower() == "null":
            return CrossOrigin("Origin is null (an opaque origin)", site, origin)
        parsed = parse_origin(value)
        if not parsed or parsed not in own:
            return CrossOrigin(f"Origin {value[:_SHOWN]!r} is not this page's", site,
                               origin)
    return None
