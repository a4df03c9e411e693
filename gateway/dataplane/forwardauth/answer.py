"""What the gateway answers a forward-auth request: pure mapping, no I/O.

Three kinds of request on the forward-auth host:

- ``/verify`` (nginx ``auth_request``): nginx only turns a 401 into its sign-in page and
  treats every other non-2xx answer as an error, so "not signed in" is always 401, never
  a redirect.
- ``/`` with ``uri`` (the sign-in target nginx sends browsers to): always starts sign-in.
- any other path (caddy, traefik): the proxy hands non-2xx answers to the browser as
  they are, so "not signed in" is the redirect that starts sign-in.

Allowed is 200 with the identity headers (``X-Gateway-Jwt-Assertion``, the claim
headers) as response headers, for the proxy to copy upstream; denied is 403.
"""

from __future__ import annotations

from enum import Enum

from gateway.authorize.hook import Allow, Decision, Reply
from gateway.dataplane.forwardauth.target import uri_param
from gateway.pages.answer import error_answer
from gateway.pages.layout import Look

Headers = list[tuple[bytes, bytes]]
VERIFY_PATH = "/verify"


class Mode(Enum):
    VERIFY = "verify"
    SIGN_IN = "sign-in"
    CHECK = "check"


def mode_of(path: str, query: bytes) -> Mode:
    if path == VERIFY_PATH:
        return Mode.VERIFY
    if path == "/" and uri_param(query) is not None:
        return Mode.SIGN_IN
    return Mode.CHECK


def unauthenticated(decision: Decision) -> bool:
    """The identity layer's "sign in first": 401, or its redirect to sign-in."""
    return isinstance(decision, Reply) and (decision.status == 401
                                           or 300 <= decision.status < 400)


def allowed(allow: Allow) -> Reply:
    """200 with the identity headers; the body is for people reading logs."""
    return Reply(200, b"OK\n", ((b"content-type", b"text/plain; charset=utf-8"),
                               (b"cache-control", b"no-store"), *allow.headers),
                reason="allowed")


def bearer_challenge(decision: Reply) -> bool:
    """A 401 refusing a bearer token (``WWW-Authenticate: Bearer error=...``): its
    caller follows no sign-in, and reads why in that header."""
    return decision.status == 401 and any(
        name.lower() == b"www-authenticate" and value[:7].lower() == b"bearer "
        for name, value in decision.headers)


def outcome(mode: Mode, decision: Decision, headers: Headers) -> Reply | None:
    """The answer to a ``/verify`` or check request given the route's decision; None
    when the answer is a fresh sign-in redirect (check requests without a session). A
    refused bearer token's 401 is answered as it is, in every mode."""
    if isinstance(decision, Allow):
        return allowed(decision)
    if bearer_challenge(decision):
        return decision
    if unauthenticated(decision):
        if mode is Mode.VERIFY:
            body, page = error_answer(401, "Sign in to reach this route.", headers, Look())
            return Reply(401, body, page, reason="user-unauthenticated")
        if decision.status == 401:
            return None
    return decision
