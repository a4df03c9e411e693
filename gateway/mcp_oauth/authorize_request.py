"""The authorization request (OAuth 2.1 4.1.1 with RFC 8707 ``resource``), checked in
the two stages the redirect URI divides it into. Pure.

Until the client and its ``redirect_uri`` are known good, an error is a page the
person reads (``PageError``): redirecting to a URI nobody checked would make the
gateway an open redirector. After that, an error goes back to the client on its
redirect URI (``RedirectError``) with ``state`` and ``iss``, as the code would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import parse_qs, urlencode

from gateway.mcp_oauth.metadata import OFFLINE, SCOPE
from gateway.mcp_oauth.pkce import challenge_problem
from gateway.mcp_oauth.resources import canonical

# each may be given at most once (RFC 6749 3.1)
_SINGLE = ("client_id", "redirect_uri", "response_type", "code_challenge",
           "code_challenge_method", "resource", "state", "scope")
_BEFORE = ("client_id", "redirect_uri")
MAX_STATE = 1024


class PageError(NamedTuple):
    """Before the redirect URI is checked: a page, never a redirect."""

    status: int
    message: str
    reason: str


class RedirectError(NamedTuple):
    """After: the OAuth error sent to the client's redirect URI."""

    error: str
    description: str


@dataclass(frozen=True, slots=True)
class AuthorizeAsk:
    """A checked authorization request (``resource`` in canonical form)."""

    client_id: str
    redirect_uri: str
    challenge: str
    resource: str
    state: str
    scope: str


def request_params(query: bytes) -> tuple[dict[str, str], tuple[str, ...]]:
    """The query's parameters (first value of each) and those given more than once."""
    parsed = parse_qs(query.decode("utf-8", "replace").lstrip("?"), keep_blank_values=True)
    twice = tuple(k for k in _SINGLE if len(parsed.get(k, ())) > 1)
    return {k: v[0] for k, v in parsed.items()}, twice


def client_stage(params: dict[str, str], twice: tuple[str, ...]) -> PageError | None:
    """The parameters a page must refuse: no client, no redirect URI, either twice."""
    if any(k in twice for k in _BEFORE):
        return PageError(400, "This authorization request names its client or its "
                         "redirect URI more than once.", "mcp-authorize-duplicate")
    if not params.get("client_id"):
        return PageError(400, "This authorization request names no client "
                         "(client_id).", "mcp-authorize-no-client")
    if not params.get("redirect_uri"):
        return PageError(400, "This authorization request names no redirect URI "
                         "(redirect_uri).", "mcp-authorize-no-redirect-uri")
    return None


def granted_scope(asked: str) -> str:
    """The scope granted: always ``mcp`` (what the route's policy lets the person do),
    with ``offline_access`` when asked for. Other scopes are ignored, as RFC 6749 3.3
    lets the server do; the token response names what was granted."""
    words = asked.split()
    return SCOPE + (" " + OFFLINE if OFFLINE in words else "")


def request_stage(params: dict[str, str], twice: tuple[str, ...]
                  ) -> AuthorizeAsk | RedirectError:
    """The rest, once the redirect URI is known good."""
    if twice:
        return RedirectError("invalid_request", f"{twice[0]} given more than once")
    if params.get("response_type") != "code":
        return RedirectError("unsupported_response_type", "response_type must be code")
    problem = challenge_problem(params.get("code_challenge", ""),
                                params.get("code_challenge_method", ""))
    if problem:
        return RedirectError("invalid_request", problem)
    resource = params.get("resource", "")
    if not resource:
        return RedirectError("invalid_target", "resource is required (RFC 8707): the "
                             "MCP server's URL")
    if not canonical(resource):
        return RedirectError("invalid_target", "resource must be an absolute http(s) "
                             "URL without a fragment")
    state = params.get("state", "")
    if len(state) > MAX_STATE:
        return RedirectError("invalid_request", f"state is longer than {MAX_STATE}")
    return AuthorizeAsk(params["client_id"], params["redirect_uri"],
                        params["code_challenge"], canonical(resource), state,
                        granted_scope(params.get("scope", "")))


def response_uri(redirect_uri: str, params: dict[str, str]) -> str:
    """``redirect_uri`` with the response's parameters added to its query (the
    registered URI's own query kept, OAuth 2.1 4.1.2)."""
    given = {k: v for k, v in params.items() if v}
    return redirect_uri + ("&" if "?" in redirect_uri else "?") + urlencode(given)


def code_response(ask: AuthorizeAsk, code: str, iss: str) -> str:
    return response_uri(ask.redirect_uri, {"code": code, "state": ask.state, "iss": iss})


def error_response(redirect_uri: str, error: RedirectError, state: str, iss: str) -> str:
    """An error on the redirect URI, with ``iss`` too (RFC 9207 2: error responses
    carry it, so a client can tell which server answered)."""
    return response_uri(redirect_uri, {"error": error.error,
                                       "error_description": error.description,
                                       "state": state, "iss": iss})
