"""Which session a request names: the session cookie on this host, or a programmatic
token (``Authorization: Gateway``); and the session record, looked up each time.

Opened tokens are cached by their exact text (a cookie is sent unchanged on every
request); the record is still looked up each time, so a deleted or expired session ends
at once. A token opens only for the purpose it was sealed for, cached or not: keyed by
the token alone, a session cookie once seen would be accepted as an ``Authorization:
Gateway`` token, and the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from gateway.caches import FifoCache
from gateway.sessions.bearer import programmatic_token
from gateway.sessions.cookie import parse_cookies, read_cookie
from gateway.sessions.model import Session
from gateway.sessions.sealed import Sealer
from gateway.sessions.store import SessionStore

TOKEN_CACHE = 20_000
# The cache keyed by a whole Cookie header keeps only headers whose session cookie
# opened, up to 4 KiB, and at most 4,096 of them (16 MiB at worst, for a client with a
# valid cookie varying its other cookies): a header can be 64 KiB, and junk is free.
CACHED_COOKIE_MAX = 4096
COOKIE_CACHE = 4096


class Found(NamedTuple):
    """A request's session (``None``: none, or not valid now), the session id it names
    (``None``: none), and its programmatic token (``""``: none)."""

    session: Session | None
    sid: str | None
    token: str


class Opened(NamedTuple):
    sid: str
    expires: float  # the seal's expiry


def cookie_and_authorization(headers: list[tuple[bytes, bytes]]) -> tuple[bytes, bool]:
    """The request's Cookie header (several joined as one), and whether it has an
    Authorization header; one pass over the headers for both."""
    cookies: list[bytes] = []
    authorization = False
    for name, value in headers:
        size = len(name)  # (cheaper than lower-casing every name)
        if size == 6:
            if name.lower() == b"cookie":
                cookies.append(value)
        elif size == 13 and name.lower() == b"authorization":
            authorization = True
    return (cookies[0] if len(cookies) == 1 else b"; ".join(cookies)), authorization


class SessionLookup:
    """Per snapshot (its sealing keys and cookie name), over the session store."""

    def __init__(self, store: SessionStore, cookies: Sealer, shared: Sealer,
                 cookie_name: str, clock: Callable[[], float]) -> None:
        self.store = store
        self.cookies = cookies
        self.shared = shared
        self.cookie_name = cookie_name
        self.clock = clock
        self._tokens: FifoCache[tuple[str, str], Opened] = FifoCache(TOKEN_CACHE)
        self._cookie_tokens: FifoCache[bytes, str] = FifoCache(COOKIE_CACHE)

    def find_in(self, headers: list[tuple[bytes, bytes]]) -> Found:
        return self.find(headers, *cookie_and_authorization(headers))

    def find(self, headers: list[tuple[bytes, bytes]], raw: bytes, authorization: bool
             ) -> Found:
        """``raw`` and ``authorization`` are ``cookie_and_authorization(headers)``."""
        now = self.clock()
        token = self._cookie_tokens.get(raw) if raw else None
        read = token is None and bool(raw)
        if read:
            token = read_cookie(parse_cookies(headers), self.cookie_name) or ""
        sid = self.open("session", self.cookies, token, now) if token else None
        if read and sid is not None and token and len(raw) <= CACHED_COOKIE_MAX:
            self._cookie_tokens.put(raw, token)
        own_token = programmatic_token(headers) if authorization else ""
        if sid is None and own_token:
            sid = self.open("programmatic", self.shared, own_token, now)
        if sid is None:
            return Found(None, None, own_token)
        session = self.store.get(sid)
        if session is None or not session.valid(now):
            return Found(None, sid, own_token)
        return Found(session, sid, own_token)

    def open(self, purpose: str, sealer: Sealer, token: str, now: float) -> str | None:
        """The session id ``token`` was sealed with for ``purpose``, while its seal is
        valid."""
        cached = self._tokens.get((purpose, token))
        if cached is not None:
            return cached.sid if now < cached.expires else None
        payload = sealer.open(purpose, token, now)
        if payload is None:
            return None
        sid = str(payload.get("sid", ""))
        self._tokens.put((purpose, token), Opened(sid, float(payload["exp"])))
        return sid

    def cookie_sealed_until(self, raw: bytes, sid: str) -> float | None:
        """Until when the session cookie in the Cookie header ``raw`` stays sealed for
        ``sid``, if that header's cookie was opened and kept (long headers are not)."""
        token = self._cookie_tokens.get(raw)
        opened = self._tokens.get(("session", token)) if token else None
        if opened is None or opened.sid != sid:
            return None
        return opened.expires
