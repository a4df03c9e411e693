"""OpenID Connect Back-Channel Logout 1.0: the provider posts a logout token to
``<authenticate_service_url>/.gateway/backchannel-logout`` and every gateway session it
names ends, with the connections they admitted, in every process sharing the store.

In order: the request's shape (a form POST from a server, ``logout_token`` at most
``MAX_TOKEN`` bytes, strictly one compact JWS: ``bearer_jwt.jws``), the provider (by the
token's ``iss``, and among several clients at one issuer by its ``aud``: ``providers``,
``addressed``), the signature (the provider's keys,
``oidc.Provider.logout_token_claims``), the claims (``logout_token``, pure), the
``jti`` spent once among every process (the store's lease, held until the token
expires), then the sessions ended (``databroker.session_ends``). The answers are the
specification's: 200 with ``Cache-Control: no-store``, or 400 with a JSON error; never a
redirect, never a page, never a cookie.

Cross-site requests: the gateway's same-origin rule for its forms (``same_origin``)
does not apply here, since a provider's server posts without ``Origin`` or a page. What
stands in its place: the token is the credential (signed by the provider, for this
client, once), and the endpoint reads no cookie and acts on no session of the caller, so
a browser posting here has nothing of its own to lend. A request a browser made is
refused anyway (``Sec-Fetch-Site``, ``Origin`` or a ``Cookie``): no page on another site
can use a person's browser to deliver a token it got hold of, and nothing here is
meant to be reached from one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from gateway.authenticate.logout_token import SKEW, Logout, LogoutTokenError, check_logout_token
from gateway.authenticate.oidc import OIDCError, Provider, ProviderUnavailable
from gateway.authenticate.targets import BACKCHANNEL_LOGOUT, form_params
from gateway.authorize.hook import Decision, Reply, RequestInfo
from gateway.bearer_jwt import jws
from gateway.observability.metrics import BACKCHANNEL_LOGOUTS
from gateway.pages.request_id import request_id

if TYPE_CHECKING:
    from gateway.authenticate.identity import Identity
    from gateway.databroker.session_ends import SessionEnds

log = Logger()

MAX_TOKEN = 16 * 1024
# What a browser sends and a provider's server does not: every current browser sends
# Sec-Fetch-Site, and Origin on a cross-origin POST. Not Sec-Fetch-Mode: Node's fetch
# (node-oidc-provider's, posting logout tokens) sends "Sec-Fetch-Mode: cors" too.
BROWSER_HEADERS = (b"sec-fetch-site", b"origin", b"cookie")
FORM = b"application/x-www-form-urlencoded"


def refusal(status: int, error: str, description: str,
            extra: tuple[tuple[bytes, bytes], ...] = ()) -> Reply:
    body = json.dumps({"error": error, "error_description": description}).encode()
    return Reply(status, body, ((b"content-type", b"application/json"),
                                (b"cache-control", b"no-store"), *extra),
                 reason=f"backchannel-logout: {error}")


def hashed(value: str) -> str:
    """A ``sid`` or ``sub`` as the log shows it: enough to match two lines, not the
    value (the specification leaves their privacy to the parties)."""
    return hashlib.sha256(value.encode()).hexdigest()[:16] if value else ""


def browser_made(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The header that says a browser sent this request (``b""``: none)."""
    for name, _ in headers:
        lowered = name.lower()
        if lowered in BROWSER_HEADERS:
            return lowered
    return b""


def providers(identity: Identity) -> Mapping[str, list[tuple[str, Provider]]]:
    """The providers that may post a logout (every interactive one: each signs people
    in), by issuer URL (without a trailing slash; the exact ``iss`` is checked against
    discovery's, and ``aud`` against that provider's own client id), with their ids.
    Several at one issuer are several clients of one provider (staff and contractors
    clients at one IdP): each is sent its own logout token, for its own client id."""
    found: dict[str, list[tuple[str, Provider]]] = {}
    for provider_id, client in identity.clients.clients.items():
        found.setdefault(client.issuer_url.rstrip("/"), []).append((provider_id, client))
    return found


def addressed(candidates: list[tuple[str, Provider]], audience: object
              ) -> tuple[str, Provider] | None:
    """The one of ``candidates`` (the providers at the token's issuer) whose client id
    the token's ``aud`` (a string or a list, not yet verified) names: which keys to
    verify it with; ``check_logout_token`` then insists on that client id."""
    named = [audience] if isinstance(audience, str) else \
        [a for a in audience if isinstance(a, str)] if isinstance(audience, list) else []
    return next((c for c in candidates if c[1].client_id in named), None)


class BackchannelLogout:
    def __init__(self, identity: Identity, ends: SessionEnds | None) -> None:
        self.identity = identity
        self.ends = ends
        self.clock: Callable[[], float] = identity.clock

    def answer(self, request: RequestInfo, body: bytes) -> Decision | Deferred[Decision]:
        rid = request_id(request.headers)
        if request.method != b"POST":
            return self._refused(rid, "", "method", 405, "invalid_request", "use POST",
                                 extra=((b"allow", b"POST"),))
        marked = browser_made(request.headers)
        if marked:
            return self._refused(rid, "", "browser", 400, "invalid_request",
                                 "a back-channel logout is posted by the identity "
                                 f"provider's server, not a browser ({marked.decode()})")
        kind = next((v for n, v in request.headers if n.lower() == b"content-type"), b"")
        if kind.split(b";")[0].strip().lower() != FORM:
            return self._refused(rid, "", "content-type", 400, "invalid_request",
                                 "the body must be application/x-www-form-urlencoded")
        token = form_params(body).get("logout_token", "") if len(body) <= 2 * MAX_TOKEN \
            else ""
        if not token or len(token) > MAX_TOKEN:
            return self._refused(rid, "", "logout_token", 400, "invalid_request",
                                 f"no logout_token of at most {MAX_TOKEN} bytes")
        if self.ends is None:
            return self._refused(rid, "", "unavailable", 400, "temporarily_unavailable",
                                 "this process keeps no sessions", result="unavailable")
        return ensureDeferred(self._logout(rid, token))

    async def _logout(self, rid: str, token: str) -> Decision:
        try:
            # strictly one compact JWS (no member named twice, canonical base64url, not
            # a JWE) before anything reads it: the parser the bearer tokens' is
            payload = jws.parse(token, MAX_TOKEN).payload
            issuer = payload.get("iss")
        except jws.Malformed as exc:
            return self._refused(rid, "", exc.check, 400, "invalid_request",
                                 f"the logout_token is not a signed JWT: {exc.description}")
        if not isinstance(issuer, str):
            return self._refused(rid, "", "iss", 400, "invalid_request",
                                 "the logout_token has no iss claim")
        candidates = providers(self.identity).get(issuer.rstrip("/"))
        if not candidates:
            return self._refused(rid, issuer, "iss", 400, "invalid_request",
                                 "the token's issuer is not a provider of this gateway",
                                 result="unknown_issuer")
        found = addressed(candidates, payload.get("aud"))
        if found is None:
            return self._refused(rid, issuer, "aud", 400, "invalid_request",
                                 "the token's aud is not the client id of a provider of "
                                 "this gateway at its issuer")
        provider_id, provider = found
        try:
            header, claims = await provider.logout_token_claims(token)
            meta = await provider.metadata()
            logout = check_logout_token(header, claims, issuer=str(meta["issuer"]),
                                        client_id=provider.client_id, now=self.clock())
        except ProviderUnavailable as exc:
            return self._refused(rid, issuer, "keys", 400, "temporarily_unavailable",
                                 "the provider's keys cannot be read now", str(exc),
                                 result="unavailable")
        except OIDCError as exc:
            return self._refused(rid, issuer, "signature", 400, "invalid_request",
                                 "the token's signature is not the provider's", str(exc))
        except LogoutTokenError as exc:
            return self._refused(rid, issuer, exc.check, 400, "invalid_request",
                                 exc.description)
        return await self._end(rid, provider_id, logout)

    async def _end(self, rid: str, provider_id: str, logout: Logout) -> Decision:
        assert self.ends is not None
        now = self.clock()
        spent = "logout-jti:" + hashlib.sha256(
            f"{logout.issuer}\x00{logout.jti}".encode()).hexdigest()
        try:
            # the sessions first (reads only), then the jti: a store that cannot answer
            # either leaves the token unspent, for the provider to send again
            named = await self.ends.named_by_logout(provider_id, logout.issuer, logout.sid,
                                                    logout.sub, logout.issued_at + SKEW)
            # remembered until the token could no longer pass the exp check anyway
            first = await self.identity.store.claim_once(
                spent, max(logout.expires_at + SKEW - now, 1.0))
        except Exception as exc:  # the store cannot answer: nothing was done
            return self._refused(rid, logout.issuer, "storage", 400,
                                 "temporarily_unavailable",
                                 "sessions cannot be ended right now", str(exc),
                                 result="unavailable")
        if not first:
            return self._refused(rid, logout.issuer, "jti", 400, "invalid_request",
                                 "this logout token was already used", result="replayed")
        ended = await self.ends.end(named, "backchannel_logout")  # (never fails)
        BACKCHANNEL_LOGOUTS.labels("ok").inc()
        log.info("back-channel logout from {provider}: {ended} session(s) ended",
                 provider=logout.issuer, ended=len(ended), sid=hashed(logout.sid),
                 sub=hashed(logout.sub), request_id=rid, result="ok")
        return Reply(200, b"", ((b"cache-control", b"no-store"),),
                     reason="backchannel-logout")

    def _refused(self, rid: str, issuer: str, check: str, status: int, error: str,
                 description: str, detail: object = "",
                 extra: tuple[tuple[bytes, bytes], ...] = (), *,
                 result: str = "invalid") -> Reply:
        BACKCHANNEL_LOGOUTS.labels(result).inc()
        log.warn("back-channel logout refused ({check}): {description}",
                 check=check, description=description, detail=str(detail)[:300],
                 provider=issuer[:200], request_id=rid, result=result,
                 endpoint=BACKCHANNEL_LOGOUT)
        return refusal(status, error, description, extra)
