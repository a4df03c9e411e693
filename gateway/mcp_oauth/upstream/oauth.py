"""The gateway as an OAuth 2.0 client of an MCP route's upstream authorization server:
the authorization URL (code flow with PKCE S256 and ``state``) and the token endpoint
(``authorization_code``, ``refresh_token``; the client authenticated with HTTP Basic,
RFC 6749 2.3.1). Every request has a deadline and a bounded answer."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from typing import Any
from urllib.parse import quote, urlencode

import treq
from treq.client import HTTPClient
from twisted.web.http_headers import Headers

from gateway.config.mcp_upstream import UpstreamOAuth2
from gateway.mcp_oauth.upstream.tokens import UpstreamTokens

TIMEOUT = 10.0
_B64TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]{1,8000}=*$")
MAX_ANSWER = 64 * 1024


class UpstreamRefused(Exception):
    """The upstream authorization server refused (``invalid_grant``: the person must
    authorize again); the text is for logs and the person's page."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(f"{error}: {description}")
        self.error = error


class UpstreamUnavailable(Exception):
    """It could not be reached or answered nonsense: try again later (503)."""


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorization_url(upstream: UpstreamOAuth2, state: str, challenge: str,
                      redirect_uri: str) -> str:
    params = {"response_type": "code", "client_id": upstream.client_id,
              "redirect_uri": redirect_uri, "state": state, "code_challenge": challenge,
              "code_challenge_method": "S256"}
    if upstream.scopes:
        params["scope"] = " ".join(upstream.scopes)
        if "offline_access" in upstream.scopes:
            params["prompt"] = "consent"  # OpenID providers issue refresh tokens only then
    sep = "&" if "?" in upstream.authorization_url else "?"
    return f"{upstream.authorization_url}{sep}{urlencode(params)}"


def _basic(upstream: UpstreamOAuth2) -> bytes:
    pair = f"{quote(upstream.client_id, safe='')}:{quote(upstream.client_secret, safe='')}"
    return b"Basic " + base64.b64encode(pair.encode())


async def _post(upstream: UpstreamOAuth2, form: dict[str, str], reactor: Any,
                http: HTTPClient) -> dict[str, Any]:
    chunks: list[bytes] = []

    def collect(data: bytes) -> None:
        chunks.append(data)
        if sum(map(len, chunks)) > MAX_ANSWER:
            raise UpstreamUnavailable(f"{upstream.token_url} answered more than "
                                      f"{MAX_ANSWER // 1024} KiB")

    try:
        response = await http.post(
            upstream.token_url, data=form, timeout=TIMEOUT, reactor=reactor,
            headers=Headers({b"authorization": [_basic(upstream)],
                             b"accept": [b"application/json"]}))
        await treq.collect(response, collect)
    except UpstreamUnavailable:
        raise
    except Exception as exc:
        raise UpstreamUnavailable(f"{upstream.token_url}: {type(exc).__name__}: "
                                  f"{exc}") from None
    try:
        answer = json.loads(b"".join(chunks))
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise UpstreamUnavailable(f"{upstream.token_url} answered {response.code} "
                                  "without a JSON object")
    if response.code != 200:
        error = str(answer.get("error", "")) or f"status {response.code}"
        raise UpstreamRefused(error, str(answer.get("error_description", ""))[:300])
    return answer


def _tokens(answer: dict[str, Any], previous_refresh: str, now: float,
            upstream: UpstreamOAuth2) -> UpstreamTokens:
    access = answer.get("access_token")
    kind = str(answer.get("token_type", "")).lower()
    if not isinstance(access, str) or not _B64TOKEN.match(access) or kind != "bearer":
        # (RFC 6750's b64token: nothing that could end the header it is sent in)
        raise UpstreamUnavailable(f"{upstream.token_url} gave no bearer access token")
    refresh = answer.get("refresh_token")
    lifetime = answer.get("expires_in")
    expires_at = now + float(lifetime) if isinstance(lifetime, int | float) and \
        not isinstance(lifetime, bool) and lifetime > 0 else 0.0
    # RFC 6749 6: without a new refresh token the old one stays valid
    return UpstreamTokens(access, refresh if isinstance(refresh, str) and refresh
                          else previous_refresh, expires_at)


async def exchange_code(upstream: UpstreamOAuth2, code: str, verifier: str,
                        redirect_uri: str, now: float, reactor: Any,
                        http: HTTPClient) -> UpstreamTokens:
    answer = await _post(upstream, {"grant_type": "authorization_code", "code": code,
                                    "redirect_uri": redirect_uri, "code_verifier": verifier},
                         reactor, http)
    return _tokens(answer, "", now, upstream)


async def refresh(upstream: UpstreamOAuth2, refresh_token: str, now: float,
                  reactor: Any, http: HTTPClient) -> UpstreamTokens:
    answer = await _post(upstream, {"grant_type": "refresh_token",
                                    "refresh_token": refresh_token}, reactor, http)
    return _tokens(answer, refresh_token, now, upstream)
