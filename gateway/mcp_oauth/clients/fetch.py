"""Fetching a client ID metadata document without letting the URL steer the gateway.

One GET, as the CIMD draft's SSRF section and MCP ask:
1. the host's name is resolved here, once, and every address checked
   (``addresses.addresses_refusal``): one special-use address refuses the name;
2. the TCP connection goes to a checked address (tried in order), never to a name:
   DNS cannot answer differently between the check and the connection (rebinding);
3. TLS on that connection verifies the certificate for the URL's host (SNI the same),
   against ``mcp_client_id_metadata_ca_file`` or the system store;
4. redirects are not followed: anything but 200 is refused (the draft: "MUST NOT
   automatically follow HTTP redirects", "MUST treat all other HTTP status codes as an
   error");
5. the answer must say JSON (``application/json`` or ``application/<x>+json``) and
   be at most ``max_bytes`` (the draft recommends 5 KB): a larger ``Content-Length`` is
   refused before reading, a body growing past it is cut off;
6. the whole of it (resolution, connection, TLS, answer, body) within ``seconds``:
   a deadline that cancels, so the connection really closes.
Every refusal is a ``ClientRefused`` (``invalid_client``) naming the URL and the reason.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import TCP4ClientEndpoint, TCP6ClientEndpoint, wrapClientTLS
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IResolutionReceiver, IStreamClientEndpoint
from twisted.internet.protocol import Protocol, connectionDone
from twisted.internet.ssl import (
    Certificate,
    optionsForClientTLS,
    platformTrust,
    trustRootFromCertificates,
)
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    HTTPConnectionPool,
    ResponseDone,
    ResponseFailed,
    ResponseNeverReceived,
)
from twisted.web.http_headers import Headers
from twisted.web.iweb import UNKNOWN_LENGTH, IAgentEndpointFactory
from zope.interface import implementer

from gateway.mcp_oauth.client_types import ClientRefused
from gateway.mcp_oauth.clients.addresses import Network, addresses_refusal

Resolver = Callable[[str], Deferred[list[str]]]

FETCH_SECONDS = 5.0
MAX_DOCUMENT_BYTES = 5 * 1024
USER_AGENT = b"gateway (MCP client ID metadata document fetch)"


@dataclass(frozen=True, slots=True)
class FetchBounds:
    seconds: float = FETCH_SECONDS
    max_bytes: int = MAX_DOCUMENT_BYTES


FETCH_BOUNDS = FetchBounds()


@dataclass(frozen=True, slots=True)
class Fetched:
    body: bytes
    cache_control: str
    expires: str
    date: str


def system_resolver(reactor: Any) -> Resolver:
    """The reactor's name resolver (getaddrinfo in a thread), every address of a name."""

    def resolve(host: str) -> Deferred[list[str]]:
        done: Deferred[list[str]] = Deferred(lambda d: None)  # a late answer is dropped
        found: list[str] = []

        @implementer(IResolutionReceiver)
        class Receiver:
            def resolutionBegan(self, resolution: object) -> None:
                pass

            def addressResolved(self, address: Any) -> None:
                found.append(address.host)

            def resolutionComplete(self) -> None:
                if not done.called:
                    done.callback(list(dict.fromkeys(found)))

        reactor.nameResolver.resolveHostName(Receiver(), host, 0)
        return done

    return resolve


def trust(ca_pem: bytes | None) -> Any:
    """The trust root of the fetch: ``ca_pem``'s CAs only, or the system store."""
    if not ca_pem:
        return platformTrust()
    return trustRootFromCertificates([
        Certificate.loadPEM(cert.public_bytes(Encoding.PEM))
        for cert in x509.load_pem_x509_certificates(ca_pem)])


@implementer(IStreamClientEndpoint)
class _CheckedAddresses:
    """TLS to the first of ``addresses`` that accepts, verified for ``host``."""

    def __init__(self, reactor: Any, addresses: Sequence[str], port: int, host: str,
                 trust_root: Any, timeout: float) -> None:
        self.reactor, self.addresses, self.port = reactor, addresses, port
        self.creator = optionsForClientTLS(host, trustRoot=trust_root)
        self.timeout = timeout

    def connect(self, factory: Any) -> Deferred[Any]:
        async def attempt() -> Any:
            failure: Exception = ConnectError("no address")
            for address in self.addresses:
                plain = address.split("%", 1)[0]
                tcp = (TCP6ClientEndpoint if ipaddress.ip_address(plain).version == 6
                       else TCP4ClientEndpoint)
                endpoint = wrapClientTLS(self.creator, tcp(self.reactor, address, self.port,
                                                           timeout=self.timeout))
                try:
                    return await endpoint.connect(factory)
                except ConnectError as exc:
                    failure = exc
            raise failure

        return Deferred.fromCoroutine(attempt())


@implementer(IAgentEndpointFactory)
class _Only:
    def __init__(self, endpoint: _CheckedAddresses) -> None:
        self.endpoint = endpoint

    def endpointForURI(self, uri: Any) -> _CheckedAddresses:
        return self.endpoint


class _TooLarge(Exception):
    pass


class _Body(Protocol):
    """Collects at most ``limit`` bytes; more cuts the connection."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.done: Deferred[bytes] = Deferred(self._cancel)

    def _cancel(self, _: Deferred[bytes]) -> None:
        if self.transport is not None:
            self.transport.stopProducing()  # type: ignore[attr-defined]

    def dataReceived(self, data: bytes) -> None:
        if self.done.called:
            return
        self.size += len(data)
        if self.size > self.limit:
            self.done.errback(_TooLarge())
            self._cancel(self.done)
            return
        self.chunks.append(data)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.done.called:
            return
        if reason.check(ResponseDone):
            self.done.callback(b"".join(self.chunks))
        else:
            self.done.errback(reason)


def _json_type(value: str) -> bool:
    media = value.split(";", 1)[0].strip().lower()
    kind, _, sub = media.partition("/")
    return kind == "application" and (sub == "json" or sub.endswith("+json"))


def _first(headers: Headers, name: bytes) -> str:
    values = headers.getRawHeaders(name) or []
    return b", ".join(values).decode("latin-1") if values else ""


def _reason(exc: BaseException) -> str:
    """A transport failure in a few words (the first wrapped reason of Twisted's)."""
    if isinstance(exc, ResponseNeverReceived | ResponseFailed) and exc.reasons:
        inner = exc.reasons[0].value
        text = str(inner) or type(inner).__name__
        module = type(inner).__module__
        if module.startswith(("OpenSSL", "service_identity")):
            return f"TLS failed: {text}"
        return text
    return str(exc) or type(exc).__name__


async def _fetch(reactor: Any, url: str, parts: SplitResult, resolve: Resolver,
                 exempt: tuple[Network, ...], trust_root: Any,
                 bounds: FetchBounds) -> Fetched:
    host = parts.hostname or ""
    def refused(why: str) -> ClientRefused:
        return ClientRefused("invalid_client",
                             f"the client metadata document at {url} was not fetched: {why}")

    try:
        ipaddress.ip_address(host)
        addresses = [host]
    except ValueError:
        try:
            addresses = await resolve(host)
        except CancelledError:
            raise
        except Exception as exc:
            raise refused(f"the name {host} does not resolve ({exc})") from None
    refusal = addresses_refusal(addresses, exempt)
    if refusal is not None:
        raise refused(f"{host}: {refusal}")
    endpoint = _CheckedAddresses(reactor, addresses, parts.port or 443, host, trust_root,
                                 bounds.seconds)
    agent = Agent.usingEndpointFactory(reactor, _Only(endpoint),
                                       pool=HTTPConnectionPool(reactor, persistent=False))
    try:
        response = await agent.request(b"GET", url.encode("ascii"), Headers({
            b"accept": [b"application/json"], b"user-agent": [USER_AGENT]}))
    except CancelledError:
        raise
    except Exception as exc:
        raise refused(_reason(exc)) from None
    body = _Body(bounds.max_bytes)
    try:
        if response.code != 200:
            where = _first(response.headers, b"location")
            extra = (f" (a redirect to {where[:200]}, which is not followed)"
                     if 300 <= response.code < 400 else "")
            raise refused(f"it answered {response.code}{extra}; only 200 is accepted")
        kind = _first(response.headers, b"content-type")
        if not _json_type(kind):
            raise refused(f"its content type is {kind or 'missing'!r}, not application/json")
        if response.length is not UNKNOWN_LENGTH and response.length > bounds.max_bytes:
            raise refused(f"it is {response.length} bytes, more than {bounds.max_bytes}")
    except ClientRefused:
        response.deliverBody(body)
        body.done.addErrback(lambda _: None)
        body.done.cancel()
        raise
    response.deliverBody(body)
    try:
        data = await body.done
    except _TooLarge:
        raise refused(f"it is larger than {bounds.max_bytes} bytes") from None
    except CancelledError:
        raise
    except Exception as exc:
        raise refused(f"the answer broke off: {_reason(exc)}") from None
    return Fetched(data, _first(response.headers, b"cache-control"),
                   _first(response.headers, b"expires"), _first(response.headers, b"date"))


def fetch(reactor: Any, url: str, parts: SplitResult, resolve: Resolver,
          exempt: tuple[Network, ...], trust_root: Any, bounds: FetchBounds
          ) -> Deferred[Fetched]:
    """The document at ``url`` (already checked by ``client_ids``), within ``bounds``."""
    done = Deferred.fromCoroutine(_fetch(reactor, url, parts, resolve, exempt, trust_root,
                                         bounds))
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        done.cancel()  # whatever step it is in: its connection is aborted

    timer = reactor.callLater(bounds.seconds, expire)

    def settle(result: Any) -> Any:
        if timer.active():
            timer.cancel()
        if expired and isinstance(result, Failure):
            raise ClientRefused("invalid_client", f"the client metadata document at {url} "
                                f"was not fetched: no whole answer within {bounds.seconds:g} s")
        return result

    return done.addBoth(settle)
