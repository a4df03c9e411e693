"""The OpenID Connect client: discovery, the authorization URL (PKCE S256), the code
exchange (client_secret_basic or _post), ID-token validation against the provider's
JWKS (``iss``, ``aud``, ``exp``, ``nonce``), userinfo and refresh.

Every network call carries a deadline; discovery and keys are cached and the keys are
fetched again when a token names a key id we have not seen.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import jwt
import treq
from twisted.internet.defer import Deferred, ensureDeferred

from gateway.observability.tracing.active import start_child
from gateway.sessions.sealed import b64url

TIMEOUT = 10.0
KEYS_REREAD = 60.0  # seconds between key set reads a logout token's unknown kid may cause
_ACCEPT_JSON: dict[bytes | str, bytes | str] = {"Accept": "application/json"}


class OIDCError(Exception):
    """The provider refused or answered something unusable; the text is for logs."""


class ProviderUnavailable(OIDCError):
    """The provider could not be reached, or went away mid-request (refused, reset,
    closed without an answer, timed out): a 503 for the person, not a sign-in error."""


# Discovery documents, key sets and token answers are a few KiB: a provider (or whatever
# answers in its name) sending more is cut off rather than buffered.
MAX_PROVIDER_BODY = 1024 * 1024


async def _http(request: Any, what: str) -> tuple[Any, bytes]:
    """Run one treq request and read its body (at most ``MAX_PROVIDER_BODY``); every
    transport failure becomes ``ProviderUnavailable`` naming the request."""
    chunks: list[bytes] = []
    size = 0

    def collect(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > MAX_PROVIDER_BODY:
            raise OIDCError(f"{what}: the answer is larger than "
                            f"{MAX_PROVIDER_BODY // 1024} KiB")
        chunks.append(data)

    try:
        response = await request
        await treq.collect(response, collect)
    except OIDCError:
        raise
    except Exception as exc:
        raise ProviderUnavailable(f"{what}: {type(exc).__name__}: {exc}") from None
    return response, b"".join(chunks)


Headers = dict[bytes | str, bytes | str]


async def traced_request(method: str, url: str, headers: Headers | None,
                         send: Callable[[Headers], Any]) -> tuple[Any, bytes]:
    """``_http`` for ``send(headers)``; inside a traced request also a client span, whose
    ``traceparent`` the provider receives. Every request to an identity provider or a
    bearer issuer's keys goes through here (``services/bearer_keys.py`` too)."""
    what = f"{method} {url}"
    span = start_child(f"idp {method} {urlsplit(url).path or '/'}",
                       {"http.request.method": method, "url.full": url.split("?", 1)[0]})
    headers = dict(headers or {})
    if span is None:
        return await _http(send(headers), what)
    for name, value in span.context_headers():
        headers[name] = value
    try:
        response, body = await _http(send(headers), what)
    except Exception as exc:
        span.end(str(exc))
        raise
    span.set("http.response.status_code", response.code)
    span.end(f"answered {response.code}" if response.code >= 500 else None)
    return response, body


@dataclass(frozen=True)
class Tokens:
    access_token: str
    id_token: str
    refresh_token: str
    expires_in: float
    claims: dict[str, Any]


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, S256 code_challenge)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, b64url(digest)


class Provider:
    """One provider's client: its own discovery, keys and HTTPS trust (``agent``: an
    ``IAgent`` trusting the provider's ``ca_file``; ``None``: the system store, which
    ``SSL_CERT_FILE`` changes as for any OpenSSL client). ``provider_id``: its id in
    ``identity_providers``, for log lines."""

    def __init__(self, reactor: Any, issuer_url: str, client_id: str, client_secret: str,
                 scopes: tuple[str, ...], request_params: dict[str, str],
                 redirect_uri: str, *, agent: Any = None, provider_id: str = "") -> None:
        self.reactor = reactor
        self.agent = agent
        self.provider_id = provider_id
        self.issuer_url = issuer_url.rstrip("/")
        self.client_id = client_id
        self.client_secret = client_secret
        self.scopes = scopes
        self.request_params = dict(request_params)
        self.redirect_uri = redirect_uri
        self._metadata: dict[str, Any] | None = None
        self._keys: dict[str, Any] = {}
        self._keys_read = float("-inf")  # when the key set was last read (reactor clock)
        self._use_post = False

    async def _get_json(self, url: str, headers: Headers | None = None) -> Any:
        response, body = await traced_request("GET", url, headers, lambda h: treq.get(
            url, headers=h, timeout=TIMEOUT, reactor=self.reactor, agent=self.agent))
        if response.code != 200:
            raise OIDCError(f"GET {url} answered {response.code}")
        try:
            return json.loads(body)
        except ValueError:
            raise OIDCError(f"GET {url} did not answer JSON") from None

    @property
    def metadata_loaded(self) -> bool:
        """Whether ``end_session_url`` can answer now (discovery has been read)."""
        return self._metadata is not None

    async def metadata(self) -> dict[str, Any]:
        if self._metadata is None:
            data = await self._get_json(f"{self.issuer_url}/.well-known/openid-configuration")
            if not isinstance(data, dict) or data.get("issuer", "").rstrip("/") != \
                    self.issuer_url:
                raise OIDCError("discovery document issuer does not match the configured "
                                "issuer (idp_provider_url, identity_providers' issuer)")
            for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                if not isinstance(data.get(key), str):
                    raise OIDCError(f"discovery document has no {key}")
            self._metadata = data
        return self._metadata

    async def authorization_url(self, state: str, nonce: str, challenge: str,
                                fresh_login: bool = False) -> str:
        """``fresh_login`` ("sign in as someone else"): ``prompt=select_account`` when the
        provider lists it, else ``login`` (OIDC Core), so an existing provider session
        is not silently reused."""
        meta = await self.metadata()
        params = {
            "client_id": self.client_id, "response_type": "code",
            "redirect_uri": self.redirect_uri, "scope": " ".join(self.scopes),
            "state": state, "nonce": nonce, "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        if "offline_access" in self.scopes:
            params.setdefault("prompt", "consent")  # refresh tokens need consent
        params.update(self.request_params)
        if fresh_login:
            offered = meta.get("prompt_values_supported") or ()
            fresh = "select_account" if "select_account" in offered else "login"
            prompts = [fresh, *params.get("prompt", "").split()]
            params["prompt"] = " ".join(dict.fromkeys(p for p in prompts if p != "none"))
        sep = "&" if "?" in meta["authorization_endpoint"] else "?"
        return f"{meta['authorization_endpoint']}{sep}{urlencode(params)}"

    async def _token_request(self, form: dict[str, str]) -> dict[str, Any]:
        """POST to the token endpoint with client_secret_basic, or client_secret_post when
        the provider offers only that or refuses basic for this client (then remembered)."""
        meta = await self.metadata()
        methods = meta.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        use_post = self._use_post or "client_secret_basic" not in methods
        response, body = await self._post_token(meta["token_endpoint"], form, use_post)
        if response.code == 401 and not use_post and "client_secret_post" in methods:
            response, body = await self._post_token(meta["token_endpoint"], form, True)
            if response.code == 200:
                self._use_post = True
        try:
            data = json.loads(body)
        except ValueError:
            raise OIDCError(f"token endpoint answered {response.code}, not JSON") from None
        if response.code != 200 or not isinstance(data, dict):
            error = data.get("error", "") if isinstance(data, dict) else ""
            raise OIDCError(f"token endpoint answered {response.code} {error}".strip())
        return data

    async def _post_token(self, endpoint: str, form: dict[str, str], use_post: bool
                          ) -> tuple[Any, bytes]:
        auth = None if use_post else (self.client_id, self.client_secret)
        if use_post:
            form = {**form, "client_id": self.client_id, "client_secret": self.client_secret}
        return await traced_request("POST", endpoint, _ACCEPT_JSON, lambda h: treq.post(
            endpoint, data=form, auth=auth, timeout=TIMEOUT, reactor=self.reactor, headers=h,
            agent=self.agent))

    async def _key_for(self, token: str, what: str = "ID token",
                       reread_after: float = 0.0) -> Any:
        """The provider key ``token`` names; an unknown ``kid`` reads the key set again,
        at most once per ``reread_after`` seconds (tokens anyone may post must not make
        the gateway fetch the provider's keys at their pace)."""
        header = jwt.get_unverified_header(token)
        kid = header.get("kid", "")
        now = self.reactor.seconds() if reread_after else 0.0
        if kid not in self._keys and (not reread_after or now - self._keys_read >= reread_after):
            meta = await self.metadata()
            jwks = await self._get_json(meta["jwks_uri"])
            self._keys_read = now
            self._keys = {k.get("kid", ""): jwt.PyJWK(k) for k in jwks.get("keys", [])
                          if k.get("use", "sig") == "sig"}
        key = self._keys.get(kid) or (next(iter(self._keys.values())) if not kid and
                                      len(self._keys) == 1 else None)
        if key is None:
            raise OIDCError(f"the {what} is signed with an unknown key {kid!r}")
        return key

    async def logout_token_claims(self, token: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The JWS header and claims of ``token`` once its signature is verified with
        the provider's key it names, in that key's algorithm only (never ``none``, never
        a MAC with a public key). The claims themselves are checked by
        ``logout_token.check_logout_token``. ``OIDCError`` names what failed."""
        await self.metadata()
        try:
            header = jwt.get_unverified_header(token)
            key = await self._key_for(token, "logout token", KEYS_REREAD)
            claims: dict[str, Any] = jwt.decode(
                token, key=key.key, algorithms=[key.algorithm_name or "RS256"],
                options={"verify_signature": True, "verify_exp": False,
                         "verify_iat": False, "verify_nbf": False, "verify_aud": False,
                         "verify_iss": False, "require": []})
        except jwt.PyJWTError as exc:
            raise OIDCError(f"signature: {exc}") from None
        return header, claims

    async def validate_id_token(self, token: str, nonce: str | None) -> dict[str, Any]:
        meta = await self.metadata()
        key = await self._key_for(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key=key.key, algorithms=[key.algorithm_name or "RS256"],
                audience=self.client_id, issuer=meta["issuer"], leeway=60,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]})
        except jwt.PyJWTError as exc:
            raise OIDCError(f"ID token rejected: {exc}") from None
        if nonce is not None and claims.get("nonce") != nonce:
            raise OIDCError("ID token nonce does not match the sign-in request")
        return claims

    async def userinfo(self, access_token: str) -> dict[str, Any]:
        meta = await self.metadata()
        endpoint = meta.get("userinfo_endpoint")
        if not endpoint or not access_token:
            return {}
        data = await self._get_json(endpoint, {"Authorization": f"Bearer {access_token}"})
        return data if isinstance(data, dict) else {}

    async def _tokens(self, data: dict[str, Any], nonce: str | None,
                      previous_refresh: str = "") -> Tokens:
        id_token = str(data.get("id_token") or "")
        claims = await self.validate_id_token(id_token, nonce) if id_token else {}
        access = str(data.get("access_token") or "")
        info = await self.userinfo(access)
        if info and claims and info.get("sub") not in (None, claims.get("sub")):
            raise OIDCError("userinfo subject differs from the ID token's")
        merged = {**info, **claims}
        return Tokens(access, id_token, str(data.get("refresh_token") or previous_refresh),
                      float(data.get("expires_in") or 3600), merged)

    def response_issuer_problem(self, iss: str | None) -> str:
        """RFC 9207: an authorization response's ``iss`` must be this provider's issuer,
        and a provider that says it sends one must send it. ``""``: no problem. This is
        the defence against a mix-up (a code from one provider delivered with another's
        sign-in): checked before the code is sent anywhere. Needs the discovery document,
        which starting the sign-in read."""
        meta = self._metadata or {}
        if iss is None:
            if meta.get("authorization_response_iss_parameter_supported") is True:
                return "the authorization response carries no iss (RFC 9207)"
            return ""
        if iss.rstrip("/") != str(meta.get("issuer", self.issuer_url)).rstrip("/"):
            return f"the authorization response's iss {iss[:120]!r} is not this provider's"
        return ""

    def exchange(self, code: str, verifier: str, nonce: str) -> Deferred[Tokens]:
        async def run() -> Tokens:
            data = await self._token_request({
                "grant_type": "authorization_code", "code": code,
                "redirect_uri": self.redirect_uri, "code_verifier": verifier})
            return await self._tokens(data, nonce)
        return ensureDeferred(run())

    def refresh(self, refresh_token: str) -> Deferred[Tokens]:
        async def run() -> Tokens:
            data = await self._token_request({"grant_type": "refresh_token",
                                              "refresh_token": refresh_token})
            return await self._tokens(data, None, refresh_token)
        return ensureDeferred(run())

    def start_url(self, state: str, nonce: str, challenge: str, fresh_login: bool = False
                  ) -> Deferred[str]:
        return ensureDeferred(self.authorization_url(state, nonce, challenge, fresh_login))

    def end_session_url(self, id_token: str, post_logout: str) -> str | None:
        meta = self._metadata or {}
        endpoint = meta.get("end_session_endpoint")
        if not endpoint:
            return None
        params = {"id_token_hint": id_token, "post_logout_redirect_uri": post_logout,
                  "client_id": self.client_id}
        return f"{endpoint}?{urlencode({k: v for k, v in params.items() if v})}"
