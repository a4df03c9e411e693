"""How long a fetched metadata document is used before it is fetched again.

The CIMD draft: respect HTTP caching (RFC 9111) within bounds of the server's own;
never cache an error or an invalid document (the directory caches only clients). Here:
``no-store``/``no-cache`` (or ``max-age=0``): not kept; ``max-age`` (else ``Expires``
against ``Date``): that long, at most ``MAX_SECONDS`` (an hour, so a client that drops a
redirect URI is believed within the hour); nothing said: ``DEFAULT_SECONDS``.
"""

from __future__ import annotations

from email.utils import parsedate_to_datetime

DEFAULT_SECONDS = 300.0
MAX_SECONDS = 3600.0


def lifetime(cache_control: str, expires: str = "", date: str = "") -> float:
    """Seconds the document stays fresh (0: do not keep it)."""
    max_age: float | None = None
    for directive in cache_control.lower().split(","):
        name, _, value = directive.strip().partition("=")
        name = name.strip()
        if name in ("no-store", "no-cache"):
            return 0.0
        if name == "max-age":
            try:
                max_age = float(int(value.strip().strip('"')))
            except ValueError:
                return 0.0  # RFC 9111 4.2.1: an invalid max-age means stale
    if max_age is None and expires:
        try:
            end = parsedate_to_datetime(expires)
            start = parsedate_to_datetime(date) if date else None
        except (TypeError, ValueError, IndexError):
            return 0.0  # an invalid Expires means already expired
        if start is None or end.tzinfo is None or start.tzinfo is None:
            return 0.0
        max_age = (end - start).total_seconds()
    if max_age is None:
        return DEFAULT_SECONDS
    return max(0.0, min(max_age, MAX_SECONDS))
