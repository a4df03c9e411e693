"""The session cookie: a sealed reference to a server-side session, its attributes,
and chunking for values longer than browsers accept in one cookie."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache

MAX_CHUNK = 3800
MAX_CHUNKS = 5
CANARY = "%"


def parse_cookies(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """All cookies of a request (later duplicates do not override earlier ones)."""
    jar: dict[str, str] = {}
    for name, value in headers:
        if name.lower() != b"cookie":
            continue
        for part in value.decode("latin-1").split(";"):
            key, sep, val = _name_and_value(part)
            if sep and key and key not in jar:
                jar[key] = val.strip().strip('"')
    return jar


def _name_and_value(part: str) -> tuple[str, str, str]:
    """One ``name=value`` of a Cookie header, read the same way by ``parse_cookies`` and
    ``strip_cookie``: if the two stripped different whitespace, a name such as
    ``\x1f_gateway_1`` would be the gateway's cookie to one and forwarded by the other."""
    return part.strip().partition("=")


def read_cookie(jar: dict[str, str], name: str) -> str | None:
    """The value of ``name``, reassembled from ``name_1``... when it was chunked."""
    value = jar.get(name)
    if value is None or not value.startswith(CANARY):
        return value
    parts = [value[1:]]
    for index in range(1, MAX_CHUNKS + 1):
        part = jar.get(f"{name}_{index}")
        if part is None:
            break
        parts.append(part)
    return "".join(parts)


def set_cookie_headers(name: str, value: str, *, max_age: int, domain: str, secure: bool,
                       http_only: bool, path: str = "/", same_site: str = "Lax"
                       ) -> list[bytes]:
    """``Set-Cookie`` values; a value too long for one cookie is split into chunks."""
    attributes = [f"Path={path}", f"Max-Age={max_age}"]
    if domain:
        attributes.append(f"Domain={domain}")
    if secure:
        attributes.append("Secure")
    if http_only:
        attributes.append("HttpOnly")
    if same_site:
        attributes.append(f"SameSite={same_site}")
    tail = "; " + "; ".join(attributes)
    if len(value) <= MAX_CHUNK:
        return [f"{name}={value}{tail}".encode("latin-1")]
    chunks = [value[i:i + MAX_CHUNK] for i in range(0, len(value), MAX_CHUNK)]
    if len(chunks) > MAX_CHUNKS + 1:
        raise ValueError("cookie value too long even in chunks")
    out = [f"{name}={CANARY}{chunks[0]}{tail}".encode("latin-1")]
    out += [f"{name}_{i}={chunk}{tail}".encode("latin-1") for i, chunk in
            enumerate(chunks[1:], start=1)]
    return out


def clear_cookie_headers(name: str, domain: str, secure: bool) -> list[bytes]:
    attributes = "; Path=/; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT"
    if domain:
        attributes += f"; Domain={domain}"
    if secure:
        attributes += "; Secure"
    return [f"{n}={attributes}".encode("latin-1") for n in
            [name, *(f"{name}_{i}" for i in range(1, MAX_CHUNKS + 1))]]


def strip_cookie(value: bytes, name: str) -> bytes:
    """A ``Cookie`` header without the gateway's own cookie (and its chunks).

    Remembered for the last 256 values up to 4 KiB: a browser sends the same header on
    every request of a session (1.6 us to split and rejoin a typical one); a longer one
    is not kept, so junk headers cannot hold 256 x 64 KiB."""
    if len(value) <= 4096:
        return _strip_cookie_cached(value, name)
    return _strip_cookie(value, name)


def _strip_cookie(value: bytes, name: str) -> bytes:
    kept = []
    prefix = f"{name}_"
    for part in value.split(b";"):
        key = _name_and_value(part.decode("latin-1"))[0]
        if key == name or (key.startswith(prefix) and key[len(prefix):].isdigit()):
            continue
        if part.strip():
            kept.append(part.strip())
    return b"; ".join(kept)


_strip_cookie_cached = lru_cache(maxsize=256)(_strip_cookie)
