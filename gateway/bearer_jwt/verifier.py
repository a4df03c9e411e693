"""One provider's bearer verification as the request path uses it: ``verify`` behind a
bounded cache, asking the provider's key source again when a token names a key it has
not seen.

A token seen before costs a hash and a dict lookup: the cache maps the token's SHA-256
(the token itself is not kept) to its ``Verified`` until the token's ``exp``, least
recently used first out past ``limit``. It is emptied whenever the key set changes (a key
the issuer withdrew verifies nothing more, even for tokens already seen). Refusals are
not cached: they are cheap until the signature, and a refused token's next try is
asked again (its issuer's keys may have arrived meanwhile).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from twisted.logger import Logger

from gateway.bearer_jwt.expect import KUBERNETES, BearerExpectations
from gateway.bearer_jwt.jws import OVERSIZE, Malformed, b64url_decode, json_object
from gateway.bearer_jwt.keys import KeySet
from gateway.bearer_jwt.verify import ISSUER, UNKNOWN_KID, Refused, Verified, verify

log = Logger(namespace="gateway.bearer")

# Entries hold the flattened claims (a few KiB for a GitHub Actions token): 4096 of them
# is at most ~20 MB per provider, and more distinct live tokens than that per provider
# are re-verified (about 50-150 µs each) rather than remembered.
CACHE_SIZE = 4096


class Keys(Protocol):
    """What a verifier needs of its provider's key source (``source.KeySource``)."""

    @property
    def keys(self) -> KeySet:
        """The current key set (the last good one)."""
        ...

    def unknown_kid(self) -> None:
        """A token named a key the set lacks: fetch again if allowed (rate-limited)."""
        ...


class Verifier:
    """``check(token)``: ``Verified`` or ``Refused``, for one provider."""

    def __init__(self, expect: BearerExpectations, source: Keys,
                 clock: Callable[[], float], limit: int = CACHE_SIZE) -> None:
        self.expect = expect
        self.source = source
        self.clock = clock
        self.limit = limit
        self._cache: OrderedDict[bytes, Verified] = OrderedDict()
        self._cache_keys: KeySet | None = None

    def __len__(self) -> int:
        return len(self._cache)

    @property
    def issuer(self) -> str:
        """The issuer this provider's tokens name (learned with the keys for
        ``kubernetes:///``)."""
        if self.expect.issuer == KUBERNETES:
            return self.source.keys.issuer
        return self.expect.issuer

    def check(self, token: str) -> Verified | Refused:
        if len(token) > self.expect.max_token_bytes:  # before hashing it
            return Refused(OVERSIZE, f"the token is longer than "
                                     f"{self.expect.max_token_bytes} bytes")
        digest = digest_of(token)
        return self.remembered(digest) or self._verify(token, digest)

    def remembered(self, digest: bytes) -> Verified | None:
        """The token of this digest as verified before, while it is valid and the keys
        it was verified with are the current ones."""
        keys = self.source.keys
        cache = self._cache
        if keys is not self._cache_keys:
            cache.clear()
            self._cache_keys = keys
            return None
        hit = cache.get(digest)
        if hit is None:
            return None
        if self.clock() < hit.expires_at:
            cache.move_to_end(digest)
            return hit
        del cache[digest]
        return None

    def _verify(self, token: str, digest: bytes) -> Verified | Refused:
        keys = self.source.keys
        result = verify(token, keys, self.expect, self.clock())
        if isinstance(result, Verified):
            cache = self._cache
            if keys is not self._cache_keys:
                cache.clear()
                self._cache_keys = keys
            if len(cache) >= self.limit:
                cache.popitem(last=False)
            cache[digest] = result
        elif result.check == UNKNOWN_KID:
            self.source.unknown_kid()
        return result


def digest_of(token: str) -> bytes:
    """What the cache keys a token by: its SHA-256 (the token itself is not kept)."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def named_issuer(token: str) -> str:
    """The ``iss`` a token names, unverified: only to choose which provider checks it
    (``""`` when it cannot be read; the chosen provider's checks then say why)."""
    parts = token.split(".")
    if len(parts) != 3:
        return ""
    try:
        iss = json_object(b64url_decode(parts[1], "payload"), "payload").get("iss")
    except Malformed:
        return ""
    return iss if isinstance(iss, str) else ""


def check_any(token: str, verifiers: Sequence[Verifier]) -> Verified | Refused:
    """A route that accepts several bearer providers: the token is checked by the ones
    whose issuer it names (normally one), each against its own keys only; a token
    naming none of them is refused (``issuer``) without any signature work. One
    provider: its check, whatever the token names (its refusal says why)."""
    if len(verifiers) == 1:
        return verifiers[0].check(token)
    if len(token) > max((v.expect.max_token_bytes for v in verifiers), default=0):
        return Refused(OVERSIZE, "the token is too long")
    digest = digest_of(token)
    for verifier in verifiers:  # a token seen before: no parse at all
        hit = verifier.remembered(digest)
        if hit is not None:
            return hit
    issuer = named_issuer(token)
    if not issuer:  # unreadable: any provider's checks say why
        return verifiers[0].check(token)
    first: Refused | None = None
    for verifier in verifiers:
        if verifier.issuer != issuer:
            continue
        result = verifier.check(token)
        if isinstance(result, Verified):
            return result
        first = first or result
    return first or Refused(ISSUER, "the issuer (iss) is not one this route accepts")


def log_refused(refused: Refused, provider: str, request_id: str) -> None:
    """The one log line of a refused token: the provider it was checked against (the
    route's providers, comma-separated, when none was chosen), the ``kid`` it named
    (bounded, printable), the check and the request id. Never the token or its
    claims (a caller's token in a log is a credential in a log)."""
    log.info("bearer token refused by {provider}: {check} (kid {kid}, request "
             "{request_id}): {description}", provider=provider, check=refused.check,
             kid=refused.kid or "-", request_id=request_id,
             description=refused.description)
