"""Fuzz target: sealed values (the session cookie, the OIDC ``state``, the sign-in and
hand-off parameters; ``gateway.sessions.sealed``) and the cookie jar around them
(``gateway.sessions.cookie``).

Input: one selector byte, then text: a ``Cookie`` header value, also read as a sealed
token for each purpose, and as a query string carrying ``state``.

Contract:

- ``Sealer.open`` returns a payload only for a token this key sealed for that purpose
  (the corpus holds such tokens, sealed with fixed nonces; any other text, mutated
  tokens included, gives None) and never raises; ``token_id`` never raises;
- reading the cookie jar never raises; a value longer than the limit is never opened;
- ``strip_cookie`` leaves none of the gateway's cookies (nor chunks) for the upstream.
"""

from __future__ import annotations

import json
from typing import Any

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway"):
    from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

    from gateway.authenticate.targets import query_params
    from gateway.authorize.hook import RequestInfo
    from gateway.sessions.cookie import parse_cookies, read_cookie, strip_cookie
    from gateway.sessions.sealed import Sealer, _unb64, b64url

KEY = bytes(range(32))
NOW = 1_700_000_000.0
COOKIE = "_gateway"
PURPOSES = ("session", "state", "sign-in", "handoff", "programmatic")
# What the corpus tokens hold: (purpose, payload, nonce). Sealed like ``Sealer.seal``
# but with fixed nonces, so the target knows every token that may open.
SEALED: tuple[tuple[str, dict[str, Any], bytes], ...] = (
    ("session", {"sid": "s-1", "exp": 2_000_000_000}, b"\x01" * 12),
    ("state", {"uri": "https://app.test/", "nonce": "n", "verifier": "v", "programmatic": "",
               "csrf": "0" * 64, "exp": 2_000_000_000}, b"\x02" * 12),
    ("sign-in", {"uri": "https://app.test/x", "exp": 2_000_000_000}, b"\x03" * 12),
    ("handoff", {"sid": "s-1", "uri": "https://app.test/", "exp": 2_000_000_000}, b"\x04" * 12),
    ("programmatic", {"sid": "s-1", "exp": 2_000_000_000}, b"\x05" * 12),
    ("session", {"sid": "s-old", "exp": 1_600_000_000}, b"\x06" * 12),  # expired
)
_AEAD = ChaCha20Poly1305(KEY)


def seal_fixed(purpose: str, payload: dict[str, Any], nonce: bytes) -> str:
    body = json.dumps(payload, separators=(",", ":")).encode()
    return b64url(nonce + _AEAD.encrypt(nonce, body, purpose.encode()))


KNOWN = {_unb64(seal_fixed(*entry)): entry for entry in SEALED}
SEALER = Sealer(KEY)


def expected(purpose: str, token: str) -> dict[str, Any] | None:
    """What ``open`` may return: a known token's payload, for its purpose, unexpired."""
    if not token or len(token) > 8192:
        return None
    try:
        raw = _unb64(token)
    except ValueError:
        return None
    entry = KNOWN.get(raw)
    if entry is None or entry[0] != purpose or entry[1]["exp"] <= NOW:
        return None
    return entry[1]


def check_token(token: str) -> None:
    SEALER.token_id(token)
    for purpose in PURPOSES:
        opened = SEALER.open(purpose, token, NOW)
        assert opened == expected(purpose, token), describe((purpose, token, opened))


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    text = data[1:].decode("latin-1")
    header = data[1:]
    jar = parse_cookies([(b"Cookie", header), (b"X-Other", b"a=b")])
    value = read_cookie(jar, COOKIE)
    check_token(text.strip())
    if value is not None:
        check_token(value)
    stripped = strip_cookie(header, COOKIE)
    left = parse_cookies([(b"cookie", stripped)])
    assert read_cookie(left, COOKIE) is None, describe((header, stripped))
    assert not any(k.startswith(COOKIE + "_") and k[len(COOKIE) + 1:].isdigit() for k in left), \
        describe((header, stripped))
    # The OIDC callback: ``state`` read from the query string, opened as state.
    request = RequestInfo(b"GET", "https", "auth.test", "/oauth2/callback",
                          b"?" + header if data[0] & 1 else header, [], "192.0.2.1")
    state = query_params(request).get("state", "")
    check_token(state)


if __name__ == "__main__":
    fuzz(TestOneInput)
