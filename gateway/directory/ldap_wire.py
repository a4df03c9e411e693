"""LDAP messages for the directory reader, on top of ldaptor's BER codec: one paged search
request at a time, entries decoded to text, result codes named.

Paged results (RFC 2696): the request carries a non-critical control with the page size
and the server's cookie from the previous page; an empty cookie in the reply ends the
search. Servers without the control simply answer everything at once (within their own
size limit, whose overflow is reported, never silently truncated).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ldaptor.protocols import pureber, pureldap
from ldaptor.protocols.ldap import ldaperrors
from ldaptor.protocols.ldap.ldapclient import LDAPClient
from twisted.internet.defer import Deferred

PAGED_RESULTS_OID = b"1.2.840.113556.1.4.319"
SUCCESS = 0
SIZE_LIMIT_EXCEEDED = 4
ADMIN_LIMIT_EXCEEDED = 11
INVALID_CREDENTIALS = 49
NO_SUCH_OBJECT = 32
INSUFFICIENT_ACCESS = 50


@dataclass(frozen=True)
class Entry:
    """A search result entry: its DN and attribute values keyed by lower-case name."""

    dn: str
    attributes: dict[str, tuple[str, ...]]

    def first(self, *names: str) -> str:
        """The first value of the first of ``names`` the entry has, else ''."""
        for name in names:
            values = self.attributes.get(name.lower())
            if values:
                return values[0]
        return ""

    def all(self, name: str) -> tuple[str, ...]:
        return self.attributes.get(name.lower(), ())


@dataclass(frozen=True)
class Page:
    """The end of one search request: its result and the cookie of the next page."""

    result_code: int
    message: str
    cookie: bytes


def result_name(code: int) -> str:
    """``invalidCredentials`` for 49 and so on (the number for unknown codes)."""
    cls = ldaperrors.LDAPExceptionCollection.collection.get(code)
    name = getattr(cls, "name", None)
    return name.decode() if isinstance(name, bytes) else f"result code {code}"


def text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def decode_entry(message: Any) -> Entry:
    attributes: dict[str, tuple[str, ...]] = {}
    for name, values in message.attributes:
        key = text(name).lower()
        attributes[key] = attributes.get(key, ()) + tuple(text(v) for v in values)
    return Entry(text(message.objectName), attributes)


def _paged_control(page_size: int, cookie: bytes) -> tuple[bytes, bool, bytes]:
    value = pureber.BERSequence([pureber.BERInteger(page_size),
                                 pureber.BEROctetString(cookie)]).toWire()
    return (PAGED_RESULTS_OID, False, value)


def _next_cookie(controls: Sequence[Any] | None) -> bytes:
    for oid, _critical, value in controls or ():
        if oid == PAGED_RESULTS_OID and value:
            decoded, _ = pureber.berDecodeObject(pureber.BERDecoderContext(), value)
            cookie = decoded[1].value
            return cookie if isinstance(cookie, bytes) else text(cookie).encode()
    return b""


def search_page(client: LDAPClient, base: str, filter_wire: Any, attributes: Sequence[str],
                page_size: int, cookie: bytes, sink: list[Entry]) -> Deferred[Page]:
    """Send one (paged) subtree search; entries go to ``sink`` as they arrive. The result
    fires when the server says the request is done, or fails with the connection."""
    request = pureldap.LDAPSearchRequest(
        baseObject=base.encode(), scope=pureldap.LDAP_SCOPE_wholeSubtree,
        derefAliases=pureldap.LDAP_DEREF_neverDerefAliases, filter=filter_wire,
        attributes=[a.encode() for a in attributes])
    controls = [_paged_control(page_size, cookie)] if page_size else None
    done: Deferred[Page] = Deferred()

    def handle(message: Any, response_controls: Any) -> bool:
        if isinstance(message, pureldap.LDAPSearchResultEntry):
            sink.append(decode_entry(message))
            return False
        if isinstance(message, pureldap.LDAPSearchResultDone):
            if not done.called:
                done.callback(Page(message.resultCode, text(message.errorMessage or b""),
                                   _next_cookie(response_controls)))
            return True
        return False  # referrals (continuation references) are not followed

    wire = client.send_multiResponse_ex(request, controls, handle)
    # ldaptor fails ``wire`` when the connection is lost; once ``done`` was cancelled
    # (the caller gave up) there is nobody left to tell
    wire.addErrback(lambda failure: None if done.called else done.errback(failure))
    return done


async def simple_bind(client: LDAPClient, dn: str, password: str) -> tuple[int, str]:
    """(result code, diagnostic message) of a simple bind."""
    response = await client.send(pureldap.LDAPBindRequest(dn=dn.encode(),
                                                           auth=password.encode()))
    return response.resultCode, text(response.errorMessage or b"")


async def start_tls_request(client: LDAPClient) -> tuple[int, str]:
    """(result code, message) of the StartTLS extended operation (RFC 4511 4.14)."""
    response = await client.send(pureldap.LDAPStartTLSRequest())
    return response.resultCode, text(response.errorMessage or b"")


def unbind(client: LDAPClient) -> None:
    client.send_noResponse(pureldap.LDAPUnbindRequest())
