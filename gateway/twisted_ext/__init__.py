"""Where the gateway goes past Twisted's (and pyOpenSSL's) public API, all in one place.

Each module says why beside the code; every private name they rely on is listed in
``tests/unit/test_twisted_canary.py``, which fails on an installed version that lacks
one, and ``setup.cfg`` bounds Twisted and pyOpenSSL to the versions it was checked on.

- ``dispatch``: the epoll reactor's loop without per-event legacy log context
  (applied to the global reactor by ``gateway.tap`` and ``gateway.worker`` only);
- ``fastio``: writing to an idle plain TCP transport without a reactor round trip;
- ``tlsio``: the listener's TLS transport with a lean data path;
- ``connect``: ``connectProtocol`` without its reference cycles;
- ``ssh_hostcert``: Conch's SSH client accepting a host key certificate.
- ``exit_status``: a SIGTERM stop that went in order exits 0, not re-raised by twistd.
"""
