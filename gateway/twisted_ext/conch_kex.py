"""Conch's key exchange table (``twisted.conch.ssh._kex``), read through public names.

Conch keeps the list of key exchanges it can run, and whether one is an elliptic curve
Diffie-Hellman, in a private module; the gateway needs both to offer only what Conch
runs (``ssh/algorithms.py``) and ECDH to servers (``ssh/upstream.py``). Bound once at
import: a caller pays nothing over the private name itself.
"""

from __future__ import annotations

from twisted.conch.ssh import _kex

RELIES_ON = (
    ("twisted.conch.ssh._kex", "", ("getSupportedKeyExchanges", "isEllipticCurve")),
)

supported_key_exchanges = _kex.getSupportedKeyExchanges
is_elliptic_curve = _kex.isEllipticCurve
