"""The listener's TLS transport: Twisted's ``TLSMemoryBIOProtocol`` with a lean data path.

Twisted's TLS layer (``BufferingTLSTransport``) is correct but slow on a busy proxy. Per
response it held the bytes for a ``callLater(0)``, encrypted them in 16 KiB slices,
then handed the ciphertext to ``FileDescriptor.write``, which always buffers and waits
for the next writability event (two ``epoll_ctl`` calls and a reactor turn). Per read
it called ``recv`` until OpenSSL said "want read" and ``bio_read`` until the memory BIO
was empty: pyOpenSSL reports both as exceptions (``WantReadError``), each costing
microseconds of Python before the request is even parsed.

This subclass keeps every behaviour of Twisted's (handshake, close_notify, aborts,
producer membrane, ``negotiatedProtocol``, errors reported to ``connectionLost``) and
replaces only the steady-state calls after the handshake:

* a read feeds the whole chunk to the memory BIO and drains the decrypted bytes with
  ``SSL_read`` into one preallocated buffer, reading OpenSSL's result code instead of
  catching exceptions; only an unusual result (close_notify, an alert, EOF) goes through
  pyOpenSSL's own error mapping, so those cases behave exactly as before;
* a write is encrypted at once (``SSL_write`` straight from the bytes, one call per
  16 KiB record, no slicing copies) and the ciphertext leaves in one piece with
  ``fastio.write_now``: sent right away when the socket's buffers are empty, queued
  (with the usual flow control) otherwise; a PROXY-protocol wrapper in between only
  relays writes, so it is written past;
* the outgoing BIO is emptied with ``BIO_read`` into the preallocated buffer, whose
  "nothing there" answer is a return value, not an exception;
* OpenSSL frees a connection's 16 KiB record buffers whenever they are empty
  (``SSL_MODE_RELEASE_BUFFERS``, as nginx does): an idle TLS connection costs ~28 KiB
  instead of ~50 KiB, for a malloc/free pair per record.

``tls_connection`` hands the pyOpenSSL connection of a TLS transport to the code that
reads the client's certificate chain from it.

The preallocated buffers are shared by every connection: the reactor thread is the
only user and the bytes are copied out before anything else can run.
"""

from __future__ import annotations

from typing import Any

from OpenSSL._util import ffi as _ffi
from OpenSSL._util import lib as _lib
from OpenSSL.SSL import Error, WantReadError, ZeroReturnError
from twisted.internet.interfaces import IProtocolFactory
from twisted.protocols.policies import ProtocolWrapper
from twisted.protocols.tls import TLSMemoryBIOFactory, TLSMemoryBIOProtocol
from twisted.python.failure import Failure

from gateway.twisted_ext.fastio import direct_writer, write_now

RELIES_ON = (
    ("twisted.protocols.tls", "TLSMemoryBIOProtocol",
     ("_checkHandshakeStatus", "_flushSendBIO", "_flushReceiveBIO", "_write",
      "_shutdownTLS", "_unbufferPendingWrites", "_tlsShutdownFinished")),
    ("OpenSSL.SSL", "Connection", ("_raise_ssl_error",)),
    ("OpenSSL._util", "", ("ffi", "lib")),
    ("OpenSSL._util", "lib", ("SSL_read", "SSL_write", "SSL_pending", "SSL_get_error",
                              "BIO_read", "BIO_write", "BIO_get_mem_data",
                              "SSL_ERROR_WANT_READ", "SSL_set_mode",
                              "SSL_MODE_RELEASE_BUFFERS")),
)
RELIES_ON_INSTANCE = (
    ("twisted.protocols.tls", "TLSMemoryBIOProtocol",
     ("_tlsConnection", "_appSendBuffer", "_handshakeDone", "_lostTLSConnection",
      "_producer", "_aborted")),
    ("OpenSSL.SSL", "Connection", ("_ssl", "_context", "_into_ssl", "_from_ssl")),
    ("OpenSSL.SSL", "Context", ("_verify_helper", "_alpn_select_helper", "_ocsp_helper")),
    ("OpenSSL.SSL", "_CallbackExceptionHelper", ("_problems",)),
)

READ_SIZE = 1 << 16  # > one TLS record (16 KiB + overhead): one SSL_read per record
OUT_SIZE = 1 << 16
RECORD = 1 << 14  # the most one SSL_write sends (pyOpenSSL allows partial writes)

_read_buffer = _ffi.new("char[]", READ_SIZE)
_out_buffer = _ffi.new("char[]", OUT_SIZE)
_mem_data = _ffi.new("char **")
_SSL_read = _lib.SSL_read
_SSL_write = _lib.SSL_write
_SSL_pending = _lib.SSL_pending
_SSL_get_error = _lib.SSL_get_error
_BIO_read = _lib.BIO_read
_BIO_write = _lib.BIO_write
_BIO_get_mem_data = _lib.BIO_get_mem_data
_WANT_READ = _lib.SSL_ERROR_WANT_READ
_from_buffer = _ffi.from_buffer
_unpack = _ffi.unpack  # char* + length -> bytes, one copy


def tls_connection(transport: Any) -> Any:
    """The pyOpenSSL ``Connection`` of a Twisted TLS transport, or None (plain text):
    the client's certificate chain is read from it (``tls/server.py``)."""
    return getattr(transport, "_tlsConnection", None)


def _callback_problem(connection: Any) -> bool:
    """Whether one of the context's Python callbacks (verify, ALPN, OCSP) failed during
    the last OpenSSL call; pyOpenSSL re-raises that, so such a result takes its path."""
    context = connection._context
    for helper in (context._verify_helper, context._alpn_select_helper,
                   context._ocsp_helper):
        if helper is not None and helper._problems:
            return True
    return False


def _pass_through(transport: Any) -> Any:
    """The transport beneath protocol wrappers that pass writes on unchanged (the PROXY
    protocol's, once its header is read, only relays): the ciphertext may go straight
    to it. Everything else (connection state, producers, closing) still goes through
    the wrappers."""
    while (isinstance(transport, ProtocolWrapper)
           and type(transport).write is ProtocolWrapper.write):
        transport = transport.transport
    return transport


class FastTLSProtocol(TLSMemoryBIOProtocol):
    """``TLSMemoryBIOProtocol`` whose established-connection reads and writes call
    OpenSSL through cffi directly and write ciphertext without a reactor turn."""

    # The OpenSSL objects of ``_tlsConnection`` (SSL, incoming and outgoing memory BIO),
    # kept here so the hot path skips two attribute lookups; valid until the protocol
    # is freed (the SSL object lives as long as a reference to it does).
    _ssl: Any = None
    _into: Any = None
    _from: Any = None
    _direct = False  # the transport is a plain TCP one: ``write_now`` applies

    _wire: Any = None  # the TCP transport the ciphertext is written to

    def makeConnection(self, transport: Any) -> None:
        wire = _pass_through(transport)
        self._direct = direct_writer(wire)
        self._wire = wire if self._direct else transport
        TLSMemoryBIOProtocol.makeConnection(self, transport)

    def _checkHandshakeStatus(self) -> None:
        connection = self._tlsConnection
        if connection is not None and self._ssl is None:
            self._ssl = connection._ssl
            _lib.SSL_set_mode(self._ssl, _lib.SSL_MODE_RELEASE_BUFFERS)
            self._into = connection._into_ssl
            self._from = connection._from_ssl
        TLSMemoryBIOProtocol._checkHandshakeStatus(self)

    # -- writing

    def write(self, data: bytes) -> None:
        if self.disconnecting and self._producer is None:
            return  # as Twisted's: no writes after loseConnection without a producer
        if type(data) is not bytes:
            data = bytes(data)  # cffi passes bytes itself as the C buffer
        size = len(data)
        if (size > RECORD or self._appSendBuffer or not self._handshakeDone
                or self._lostTLSConnection):
            self._write(data)
            return
        # The usual response: at most one record, encrypted and sent in one go.
        if size and _SSL_write(self._ssl, data, size) != size:
            TLSMemoryBIOProtocol._write(self, data)  # pyOpenSSL's errors decide
            return
        self._flushSendBIO()

    def writeSequence(self, iovec: Any) -> None:
        self.write(b"".join(iovec))

    def _write(self, data: bytes) -> None:
        if self._lostTLSConnection or not data:
            return
        if self._appSendBuffer or not self._handshakeDone:
            TLSMemoryBIOProtocol._write(self, data)  # queued behind earlier bytes, or mid-handshake
            return
        ssl = self._ssl
        size = len(data)
        sent = _SSL_write(ssl, data, size)
        if 0 < sent < size:
            # pyOpenSSL's contexts allow partial writes: one record (16 KiB) a call
            with _from_buffer(data) as view:
                while 0 < sent < size:
                    result = _SSL_write(ssl, view + sent, size - sent)
                    if result <= 0:
                        break
                    sent += result
        if sent < size:
            # Not expected with memory BIOs after the handshake; Twisted's path
            # (pyOpenSSL's exceptions: buffer on "want read", close on an error) decides.
            self._flushSendBIO()
            TLSMemoryBIOProtocol._write(self, data[max(sent, 0):])
            return
        self._flushSendBIO()

    def _flushSendBIO(self) -> None:
        """Send what OpenSSL wrote to the outgoing memory BIO, in one write."""
        bio = self._from
        if bio is None:
            return
        n = _BIO_read(bio, _out_buffer, OUT_SIZE)
        if n <= 0:
            return
        data = _unpack(_out_buffer, n)
        if n == OUT_SIZE:
            chunks = [data]
            while n == OUT_SIZE:
                n = _BIO_read(bio, _out_buffer, OUT_SIZE)
                if n > 0:
                    chunks.append(_unpack(_out_buffer, n))
            data = b"".join(chunks)
        if self._direct:
            write_now(self._wire, data)
        else:
            self._wire.write(data)

    # -- reading

    def dataReceived(self, data: bytes) -> None:
        if not self._handshakeDone:
            TLSMemoryBIOProtocol.dataReceived(self, data)  # the handshake: Twisted's path, once
            return
        if self._lostTLSConnection:
            return
        _BIO_write(self._into, data, len(data))  # a memory BIO takes all of it
        if self._appSendBuffer:
            TLSMemoryBIOProtocol._unbufferPendingWrites(self)
        self._flushReceiveBIO()

    def _flushReceiveBIO(self) -> None:
        """Deliver every decrypted byte now in the incoming BIO, then send what reading
        made OpenSSL write (alerts, key updates)."""
        ssl, into = self._ssl, self._into
        while not self._lostTLSConnection:
            n = _SSL_read(ssl, _read_buffer, READ_SIZE)
            if n > 0:
                if not self._aborted:
                    self.wrappedProtocol.dataReceived(_unpack(_read_buffer, n))
                if not _SSL_pending(ssl) and not _BIO_get_mem_data(into, _mem_data):
                    break  # no record left: another SSL_read would only say "want read"
                continue
            connection = self._tlsConnection
            if _SSL_get_error(ssl, n) == _WANT_READ and not _callback_problem(connection):
                break  # everything received so far is delivered
            if self._settle_read_error(connection, ssl, n):
                break
        self._flushSendBIO()

    def _settle_read_error(self, connection: Any, ssl: Any, result: int) -> bool:
        """Twisted's handling of an unusual ``SSL_read`` result, through pyOpenSSL's own
        error mapping; True when reading must stop."""
        try:
            connection._raise_ssl_error(ssl, result)
        except WantReadError:
            return True
        except ZeroReturnError:
            # close_notify: answer it; connectionLost gets the transport's reason
            TLSMemoryBIOProtocol._shutdownTLS(self)
            TLSMemoryBIOProtocol._tlsShutdownFinished(self, None)
        except Error:
            TLSMemoryBIOProtocol._tlsShutdownFinished(self, Failure())
        else:
            return True
        return False


class FastTLSFactory(TLSMemoryBIOFactory):
    """``TLSMemoryBIOFactory`` building ``FastTLSProtocol`` server connections."""

    protocol = FastTLSProtocol

    def __init__(self, contextFactory: Any, wrappedFactory: IProtocolFactory,
                 clock: Any = None) -> None:
        super().__init__(contextFactory, False, wrappedFactory, clock)
