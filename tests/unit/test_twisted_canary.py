"""Every private name of Twisted, pyOpenSSL and txredisapi the gateway relies on exists in
the installed versions.

The gateway goes past public APIs where speed or correctness needed it
(``gateway/twisted_ext``, and the few uses listed below elsewhere). A release of one of
these libraries may rename what it never promised to keep; this test names the name
and the module that needs it, instead of an AttributeError on the hot path in
production. Methods and classes are looked up; attributes a library sets on its
instances are looked for in the source of the class that sets them.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

# (module, object path or "", names): each name must be an attribute of the object.
ATTRIBUTES: list[tuple[str, str, tuple[str, ...], str]] = [
    ("twisted.internet.epollreactor", "EPollReactor", ("_doReadOrWrite", "doPoll"),
     "twisted_ext/dispatch.py"),
    ("twisted.protocols.tls", "TLSMemoryBIOProtocol",
     ("_checkHandshakeStatus", "_flushSendBIO", "_flushReceiveBIO", "_write",
      "_shutdownTLS", "_unbufferPendingWrites", "_tlsShutdownFinished"),
     "twisted_ext/tlsio.py"),
    ("OpenSSL.SSL", "Connection", ("_raise_ssl_error",), "twisted_ext/tlsio.py"),
    ("OpenSSL._util", "", ("ffi", "lib"), "twisted_ext/tlsio.py"),
    ("OpenSSL._util", "lib", ("SSL_read", "SSL_write", "SSL_pending", "SSL_get_error",
                              "BIO_read", "BIO_write", "BIO_get_mem_data",
                              "SSL_ERROR_WANT_READ", "SSL_set_mode",
                              "SSL_MODE_RELEASE_BUFFERS"), "twisted_ext/tlsio.py"),
    ("twisted.internet._sslverify", "", ("ClientTLSOptions",), "tls/client.py"),
    ("twisted.internet._posixstdio", "", ("StandardIO",), "worker.py"),
    ("twisted.internet.base", "ReactorBase", ("_exitSignal",), "twisted_ext/exit_status.py"),
    ("txredisapi", "", ("_SentinelEndpoint", "_makeEndpoint"), "databroker/kv_tls.py"),
    ("twisted.conch.ssh.transport", "SSHClientTransport",
     ("ssh_KEX_DH_GEX_GROUP", "_generateECSharedSecret", "_encodeECPublicKey", "_keySetup"),
     "twisted_ext/ssh_hostcert.py"),
    ("twisted.conch.ssh._kex", "", ("getHashProcessor", "isEllipticCurve"),
     "twisted_ext/ssh_hostcert.py, ssh/upstream.py"),
]
# (module, class, names): instance attributes, found in the class's source.
INSTANCE_ATTRIBUTES: list[tuple[str, str, tuple[str, ...], str]] = [
    ("twisted.internet.epollreactor", "EPollReactor", ("_poller", "_selectables"),
     "twisted_ext/dispatch.py"),
    ("twisted.internet.abstract", "FileDescriptor",
     ("_tempDataBuffer", "dataBuffer", "offset", "_writeDisconnected"),
     "twisted_ext/fastio.py, dataplane/pipes/splice.py"),
    ("twisted.protocols.tls", "TLSMemoryBIOProtocol",
     ("_tlsConnection", "_appSendBuffer", "_handshakeDone", "_lostTLSConnection",
      "_producer", "_aborted"), "twisted_ext/tlsio.py"),
    ("OpenSSL.SSL", "Connection", ("_ssl", "_context", "_into_ssl", "_from_ssl"),
     "twisted_ext/tlsio.py"),
    ("OpenSSL.SSL", "Context", ("_verify_helper", "_alpn_select_helper", "_ocsp_helper"),
     "twisted_ext/tlsio.py"),
    ("OpenSSL.SSL", "_CallbackExceptionHelper", ("_problems",), "twisted_ext/tlsio.py"),
    ("twisted.internet.endpoints", "_WrappingProtocol", ("_wrappedProtocol",),
     "twisted_ext/connect.py (read with getattr: a rename would fail silently)"),
    ("twisted.internet.tcp", "Connection", ("_maybePauseProducer",),
     "dataplane/codecs/http1.py (read with getattr, skipped if gone)"),
    ("txredisapi", "ConnectionHandler", ("_factory",),
     "databroker/kv_connect.py, databroker/kv_cluster.py"),
    ("twisted.conch.ssh.transport", "SSHClientTransport", ("ecPriv", "ecPub"),
     "twisted_ext/ssh_hostcert.py"),
    ("twisted.conch.ssh.transport", "SSHTransportBase",
     ("ourKexInitPayload", "otherKexInitPayload", "otherVersionString", "kexAlg", "keyAlg"),
     "twisted_ext/ssh_hostcert.py"),
]


def resolve(module: str, path: str) -> Any:
    obj: Any = __import__(module, fromlist=["_"])
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("module", "path", "names", "user"), ATTRIBUTES,
                         ids=[f"{m}:{p}" for m, p, _, _ in ATTRIBUTES])
def test_attributes_exist(module: str, path: str, names: tuple[str, ...], user: str) -> None:
    obj = resolve(module, path)
    missing = [name for name in names if not hasattr(obj, name)]
    assert not missing, f"{module}.{path} lacks {missing}, which {user} relies on"


@pytest.mark.parametrize(("module", "path", "names", "user"),
                         INSTANCE_ATTRIBUTES,
                         ids=[f"{m}:{p}" for m, p, _, _ in INSTANCE_ATTRIBUTES])
def test_instance_attributes_are_set(module: str, path: str, names: tuple[str, ...],
                                     user: str) -> None:
    cls = resolve(module, path)
    source = "".join(inspect.getsource(k) for k in cls.__mro__
                     if k.__module__.split(".")[0] == module.split(".")[0])
    missing = [name for name in names if name not in source]
    assert not missing, f"{module}.{path} no longer mentions {missing} ({user})"
