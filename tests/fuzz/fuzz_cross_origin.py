"""Fuzz target: ``gateway.wire.cross_origin``, the check every form of the gateway
passes (issue 39): ``Sec-Fetch-Site`` and ``Origin`` as a client sends them.

Input: the two header values, ``Sec-Fetch-Site`` then ``Origin``, separated by a
newline; the first byte says which are sent (bit 0: Sec-Fetch-Site, bit 1: Origin; bit
2: a state-changing link rather than a form).

Contract: never raises. With ``Sec-Fetch-Site`` sent, it alone decides: passed exactly
when it is ``same-origin`` (or ``none`` for a link), in any letter case, surrounding
white space aside. Without it, an ``Origin`` passes only when it names one of the own
origins, by a matcher written independently here: http(s), the host in any case with
at most one trailing dot, the scheme's default port or the own one (leading zeros
allowed), nothing else. With neither the request passes (the token decides).
"""

from __future__ import annotations

import re

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway"):
    from gateway.wire.cross_origin import cross_origin

OWN = frozenset({"https://auth.test", "http://app.test:8080"})
_OWN_TEXT = re.compile(r"https://auth\.test\.?(:0*443)?|http://app\.test\.?:0*8080",
                       re.IGNORECASE)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    flags, rest = data[0], data[1:]
    site_raw, _, origin_raw = rest.partition(b"\n")
    headers: list[tuple[bytes, bytes]] = []
    if flags & 1:
        headers.append((b"Sec-Fetch-Site", site_raw))
    if flags & 2:
        headers.append((b"Origin", origin_raw))
    navigation = bool(flags & 4)
    refused = cross_origin(headers, OWN, navigation=navigation)
    site = site_raw.decode("latin-1").strip().lower()
    origin = origin_raw.decode("latin-1").strip()
    if flags & 1:
        passes = site == "same-origin" or (navigation and site == "none")
        assert (refused is None) == passes, describe((data, refused))
    elif flags & 2:
        assert (refused is None) == bool(_OWN_TEXT.fullmatch(origin)), \
            describe((data, refused))
    else:
        assert refused is None, describe(data)


if __name__ == "__main__":
    fuzz(TestOneInput)
