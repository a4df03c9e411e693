"""The gateway's own bearer tokens on requests (programmatic login, ``gateway tcp``).

Recognised by the identity layer (to sign the request in) and by the data plane (so
that a route never forwards one to its upstream, public routes included).
"""

from __future__ import annotations


def programmatic_token(headers: list[tuple[bytes, bytes]]) -> str:
    """``Authorization: Gateway <token>`` or ``Authorization: Bearer Gateway-<token>``."""
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        text = value.decode("latin-1").strip()
        if text[:8].lower() == "gateway ":
            return text[8:].strip()
        if text[:7].lower() == "bearer " and text[7:15].lower() == "gateway-":
            return text[15:].strip()
    return ""
