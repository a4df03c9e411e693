"""Outside bearer tokens on requests (issue 42): ``Authorization: Bearer <JWT>`` on a route
that accepts a bearer provider, turned into the ``Caller`` the HTTP entrance decides on,
or into the answer that refuses it. Per snapshot, over the snapshot's ``Verifier`` of
each bearer provider (``gateway.services.bearer_providers``); the decision itself stays
the entrance's (``gateway.authorize.http_requests.Decider``: the same ``decide``).

What a request meets here, in order:

- the route's bearer providers are those its ``identity_providers`` names that have
  ``bearer`` settings; the token's unverified ``iss`` only chooses among them
  (``check_any``): keys and issuers never cross providers, and a token naming another
  route's provider is refused (``issuer``) without any signature work;
- two ``Authorization`` headers, or one that is not a single token: 401 (``malformed``);
- the gateway's session cookie beside the token: 400 (which identity would it be?);
- refused: 401 with ``WWW-Authenticate: Bearer error="invalid_token",
  error_description="..."`` naming the check (a fixed text, never the token), and one
  log line (provider, ``kid``, check, request id);
- verified: the token's ``Caller`` (``Verified.caller``: the one place it is made),
  one object per verified token (the verifier's cache returns the same ``Verified``),
  so that the entrance's caches and the assertion signer's see it again.

The same Authorization header on the same route again is answered from ``_seen`` while
what its verifier would answer is unchanged (the provider's key set is the same object,
the token's ``exp`` is ahead): the verifier's own cache costs a parse of the header, a
SHA-256 of the token and the choice of provider, which this skips.

A request offering a bearer token to a route that accepts none is the route's as before
(a session decides, the header is the application's); only where it would be answered
with sign-in, it gets a 401 naming the reason instead: a caller holding a token does not
follow a sign-in redirect.

Every outcome is counted in ``gateway_bearer_tokens_total{provider,result}``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import NamedTuple

from gateway.authorize import answers
from gateway.authorize.caller import Caller
from gateway.authorize.hook import Reply, RequestInfo
from gateway.bearer_jwt.header import bearer_jwt
from gateway.bearer_jwt.keys import KeySet
from gateway.bearer_jwt.verifier import Verifier, check_any, log_refused, named_issuer
from gateway.bearer_jwt.verify import EXPIRED, Refused, Verified
from gateway.caches import FifoCache
from gateway.config.providers import IdentityProvider
from gateway.config.routes import Route
from gateway.observability.bearer_metrics import count_token
from gateway.pages.layout import Look
from gateway.pages.request_id import request_id
from gateway.sessions.cookie import parse_cookies, read_cookie

CALLERS = 4096  # one per verified token in use (the verifiers' caches hold as many)
SEEN = 4096  # (route, Authorization header) answered again without verifying
# results of ``gateway_bearer_tokens_total`` beside the checks' names
ALLOWED = "allowed"
DENIED = "denied"
COOKIE_AND_BEARER = "cookie_and_bearer"
NO_PROVIDER = "none"  # the provider label when the token chose none of the route's


class Seen(NamedTuple):
    """A verified Authorization header: the verifier that verified it and its key set
    then."""

    verifier: Verifier
    keys: KeySet
    verified: Verified
    caller: Caller


class BearerCallers:
    """Per snapshot: the bearer providers' verifiers and which of them each route
    accepts; ``caller`` for a request to such a route."""

    def __init__(self, verifiers: Mapping[str, Verifier],
                 providers: tuple[IdentityProvider, ...], cookie_name: str, look: Look,
                 clock: Callable[[], float]) -> None:
        self.verifiers = dict(verifiers)
        self.bearer_ids = frozenset(p.id for p in providers if p.bearer is not None)
        self.cookie_name = cookie_name
        self.cookie_bytes = cookie_name.encode("latin-1")
        self.look = look
        self.clock = clock
        self._routes: dict[int, tuple[Verifier, ...]] = {}
        self._callers: FifoCache[int, tuple[Verified, Caller]] = FifoCache(CALLERS)
        self._seen: FifoCache[tuple[int, bytes], Seen] = FifoCache(SEEN)

    def of(self, route: Route) -> tuple[Verifier, ...]:
        """The verifiers of the bearer providers ``route`` accepts, in the order its
        ``identity_providers`` names them (none named: none, the default being every
        interactive provider)."""
        found = self._routes.get(route.index)
        if found is None:
            found = tuple(self.verifiers[p] for p in route.identity_providers
                          if p in self.bearer_ids and p in self.verifiers)
            self._routes[route.index] = found
        return found

    def caller(self, request: RequestInfo, route: Route, raw_cookie: bytes
               ) -> Caller | Reply | None:
        """The caller a bearer token on ``request`` names (``None``: it carries none),
        or the answer refusing it. ``route`` accepts a bearer provider (``of``);
        ``raw_cookie``: the request's Cookie header."""
        found = [v for n, v in request.headers
                 if len(n) == 13 and n.lower() == b"authorization"]
        cookie = bool(raw_cookie) and self.cookie_bytes in raw_cookie
        if len(found) == 1 and not cookie:
            seen = self._seen.get((route.index, found[0]))
            if seen is not None and seen.verifier.source.keys is seen.keys and \
                    self.clock() < seen.verified.expires_at:
                return seen.caller
        token = bearer_jwt(request.headers)
        if not token:
            return None
        verifiers = self.of(route)
        if isinstance(token, Refused):
            return self.refused(request, token, self._provider_label(verifiers, ""))
        if cookie and read_cookie(
                parse_cookies(request.headers), self.cookie_name):
            count_token(verifiers[0].expect.provider if len(verifiers) == 1
                        else NO_PROVIDER, COOKIE_AND_BEARER)
            return self.error(400, "This request carries both a session cookie and a bearer "
                              "token: send one of them (which identity would it be?).",
                              request, "cookie-and-bearer-token")
        result = check_any(token, verifiers)
        if isinstance(result, Refused):
            return self.refused(request, result, self._provider_label(verifiers, token))
        hit = self._callers.get(id(result))
        if hit is not None and hit[0] is result:
            caller = hit[1]
        else:
            caller = result.caller()
            # (the Verified is kept beside it: its id is not reused while it is here)
            self._callers.put(id(result), (result, caller))
        verifier = self.verifiers[result.provider]
        if len(found) == 1:
            self._seen.put((route.index, found[0]),
                           Seen(verifier, verifier.source.keys, result, caller))
        return caller

    @staticmethod
    def _provider_label(verifiers: tuple[Verifier, ...], token: str) -> str:
        """The provider a refused token was checked against: the route's only one, or
        the one whose issuer it names; else ``none``."""
        if len(verifiers) == 1:
            return verifiers[0].expect.provider
        issuer = named_issuer(token) if token else ""
        return next((v.expect.provider for v in verifiers if issuer and v.issuer == issuer),
                    NO_PROVIDER)

    def refused(self, request: RequestInfo, refused: Refused, provider: str) -> Reply:
        """401 naming the failed check (``WWW-Authenticate``, RFC 6750 3.1), logged."""
        log_refused(refused, provider, request_id(request.headers))
        count_token(provider, refused.check)
        return self.error(401, f"The bearer token was refused ({refused.check}): "
                          f"{refused.description}.", request,
                          f"bearer-token-refused: {refused.check}",
                          ((b"www-authenticate", refused.www_authenticate().encode("ascii")),))

    def expired(self, request: RequestInfo, caller: Caller) -> Reply:
        """A token that verified within the clock skew past its ``exp`` and that the
        route's policy does not let in as no one: expired (never a sign-in answer)."""
        return self.refused(request, Refused(EXPIRED, "the token has expired"),
                            caller.provider)

    def offered(self, request: RequestInfo) -> Reply | None:
        """A route that accepts no bearer provider, a request it would answer with
        sign-in: 401 when the request offers a bearer token (it would not follow a
        redirect), else ``None``."""
        token = bearer_jwt(request.headers)
        if not token:
            return None
        description = "this route accepts no bearer tokens"
        challenge = f'Bearer error="invalid_token", error_description="{description}"'
        count_token(NO_PROVIDER, "route_accepts_none")
        return self.error(401, "This route accepts no bearer tokens: sign in, or ask its "
                          "administrator which identity providers it accepts.", request,
                          "bearer-token-not-accepted",
                          ((b"www-authenticate", challenge.encode("ascii")),))

    def challenge(self, route: Route, answer: Reply) -> Reply:
        """A request without any credential on a route that accepts bearer providers,
        answered 401 (not a browser, or no browser sign-in there): that answer with
        ``WWW-Authenticate: Bearer`` (RFC 6750 3: the scheme, no error, as the request
        carried no token), so a caller that forgot its token is told which kind."""
        if answer.status != 401 or not self.of(route):
            return answer
        return replace(answer, headers=(*answer.headers, (b"www-authenticate", b"Bearer")))

    @staticmethod
    def counted(provider: str, result: str) -> None:
        """The entrance's outcomes (``allowed``, ``denied``) in the same counter."""
        count_token(provider, result)

    def error(self, status: int, message: str, request: RequestInfo, reason: str,
              extra: tuple[tuple[bytes, bytes], ...] = ()) -> Reply:
        return answers.error(status, message, request.headers, reason,
                             extra, look=self.look)
