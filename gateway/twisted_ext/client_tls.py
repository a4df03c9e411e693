"""``ClientTLSOptions``: Twisted's client-side connection creator around our own context.

``optionsForClientTLS`` builds its own OpenSSL context from Twisted's options; the
upstream and kvstore connections need contexts of ours (per-route roots, client
certificates), and ``ClientTLSOptions``, which takes a function making each connection
and adds the server name check and SNI to it, is only importable from
``twisted.internet._sslverify``.
"""

from __future__ import annotations

from twisted.internet._sslverify import ClientTLSOptions

RELIES_ON = (
    ("twisted.internet._sslverify", "", ("ClientTLSOptions",)),
)

__all__ = ["ClientTLSOptions"]
