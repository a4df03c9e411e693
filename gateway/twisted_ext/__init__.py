"""Where the gateway goes past Twisted's (Conch's, and pyOpenSSL's under Twisted's TLS)
public API, all in one place; ``gateway.adapters`` does the same for other libraries.

Each module says why beside the code and declares the private names it relies on
(``RELIES_ON``, ``RELIES_ON_INSTANCE``); ``tests/unit/test_private_names.py`` holds that no
other module uses one and that each used here is declared, ``tests/unit/test_twisted_canary.py``
fails on an installed version that lacks one, and ``setup.cfg`` bounds Twisted and
pyOpenSSL to the versions it was checked on.

- ``dispatch``: the epoll reactor's loop without per-event legacy log context
  (applied to the global reactor by ``gateway.tap`` and ``gateway.worker`` only);
- ``fastio``: writing to an idle plain TCP transport without a reactor round trip; a
  transport's buffers and producer pause for the splice pipe and the HTTP/1.1 codec;
- ``tlsio``: the listener's TLS transport with a lean data path; a TLS transport's
  pyOpenSSL connection;
- ``connect``: ``connectProtocol`` without its reference cycles;
- ``ssh_hostcert``: Conch's SSH client accepting a host key certificate;
- ``conch_kex``: Conch's table of key exchanges;
- ``client_tls``: ``ClientTLSOptions`` around connections we make;
- ``stdio``: the POSIX ``StandardIO``, and whether its standard output is gone;
- ``listen``: a listening service that fails the start when it cannot listen;
- ``exit_status``: a SIGTERM stop that went in order exits 0, not re-raised by twistd.
"""
