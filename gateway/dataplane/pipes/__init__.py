"""Kernel-side relaying (``splice``) for the byte pipes of websocket/SPDY upgrades and
CONNECT tunnels (the pipe itself is ``gateway.net.pipe``, shared with ``gateway tcp``).
"""
