"""The LDAP directory provider (ldaptor: Twisted-native, no threads).

One :meth:`LDAPProvider.fetch` is one connection: connect (``ldaps://`` is TLS from the
start), StartTLS when asked, simple bind, paged subtree searches for users and for
groups, unbind. Group nesting is resolved by :mod:`gateway.directory.membership`.

Cancelling the returned Deferred (``addTimeout`` with idp_refresh_directory_timeout)
aborts the connection at once, whatever step it is in. Failures are
:class:`DirectoryError` with the server, the step and a reason an operator can act on.

Importing this module imports ldaptor's client, which imports ``twisted.internet.reactor``
(installing the default one if none is yet): :func:`~gateway.directory.provider_for`
imports it only when a service account describes LDAP, i.e. at run time, after twistd
installed the reactor.
"""

from __future__ import annotations

from typing import Any

from ldaptor.protocols.ldap.ldapclient import LDAPClient
from OpenSSL import SSL
from service_identity import VerificationError
from twisted.internet import error
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.interfaces import IHandshakeListener
from zope.interface import implementer

from gateway.config.ldap_filter import parse_filter
from gateway.config.service_account import LDAPAccount
from gateway.directory import ldap_wire
from gateway.directory.membership import GroupEntry, UserEntry, build_directory
from gateway.directory.model import Directory, DirectoryError
from gateway.tls.client import TLSClientConfig, connection_creator
from gateway.twisted_ext.connect import connect_protocol

#: Connection attempts give up after this long (the whole run is bounded by the caller).
CONNECT_TIMEOUT = 30.0



def tls_config(account: LDAPAccount) -> TLSClientConfig:
    """The client TLS settings of ``account`` (shared with upstreams and the kvstore),
    no ALPN."""
    return TLSClientConfig(account.tls_server_name, account.tls_skip_verify, account.ca,
                           None, None, alpn=())


def _tls_reason(exc: BaseException) -> str | None:
    """Why a TLS handshake failed, or None when ``exc`` is no TLS failure."""
    if isinstance(exc, VerificationError):
        names = ", ".join(sorted({
            ldap_wire.text(getattr(getattr(e, "mismatched_id", None), "hostname", None)
                           or getattr(e, "mismatched_id", e))
            for e in exc.errors}))
        return (f"TLS: the server certificate is not valid for {names}; set tls_server_name "
                "to a name the certificate holds")
    if isinstance(exc, SSL.Error):
        details = [str(part[2]) for part in (exc.args[0] if exc.args else [])
                   if isinstance(part, tuple) and len(part) == 3]
        reason = ", ".join(details) or str(exc)
        hint = ("; check ca / ca_file (or the system roots) and tls_server_name"
                if "verify" in reason else "")
        return f"TLS handshake failed: {reason}{hint}"
    return None


@implementer(IHandshakeListener)
class _Client(LDAPClient):  # type: ignore[misc]
    """ldaptor's client, told when a TLS handshake completes (to explain a server that
    hangs up during one)."""

    tls_pending = False

    def handshakeCompleted(self) -> None:
        self.tls_pending = False


def _reason(exc: BaseException) -> str:
    tls = _tls_reason(exc)
    if tls is not None:
        return tls
    if isinstance(exc, error.ConnectionRefusedError):
        return "connection refused (is the server running and listening there?)"
    if isinstance(exc, error.DNSLookupError):
        return "cannot resolve the host name"
    if isinstance(exc, error.TimeoutError):
        return "connection attempt timed out"
    if isinstance(exc, error.ConnectionDone | error.ConnectionLost):
        return "the server closed the connection"
    return f"{type(exc).__name__}: {exc}"


class LDAPProvider:
    """Reads one LDAP directory per :meth:`fetch` (see the module docstring)."""

    name = "ldap"

    def __init__(self, account: LDAPAccount, reactor: Any) -> None:
        self.account = account
        self.reactor = reactor
        self._user_filter = parse_filter(account.user_filter)
        self._group_filter = parse_filter(account.group_filter)

    def __repr__(self) -> str:
        return f"<LDAPProvider {self.account.url} as {self.account.bind_dn or 'anonymous'}>"

    def fetch(self) -> Deferred[Directory]:
        return Deferred.fromCoroutine(self._fetch())

    def _fail(self, operation: str, reason: str) -> DirectoryError:
        return DirectoryError(self.account.url, operation, reason)

    async def _step(self, operation: str, work: Deferred[Any],
                    client: _Client | None = None) -> Any:
        """``await work``, turning its failure into a DirectoryError about ``operation``
        (cancellation stays cancellation, so ``addTimeout`` can report a timeout)."""
        try:
            return await work
        except (CancelledError, DirectoryError):
            raise
        except Exception as exc:
            reason = _reason(exc)
            if client is not None and isinstance(exc, error.ConnectionDone
                                                 | error.ConnectionLost):
                if client.tls_pending:
                    reason = ("the server closed the connection during the TLS handshake; "
                              "does this port speak TLS (ldaps://), or StartTLS (ldap://)?")
                elif not (self.account.tls or self.account.start_tls):
                    reason += " (a port that expects TLS, ldaps://, does so to plain LDAP)"
            raise self._fail(operation, reason) from exc

    async def _fetch(self) -> Directory:
        account = self.account
        endpoint: Any = HostnameEndpoint(self.reactor, account.host, account.port,
                                         timeout=CONNECT_TIMEOUT)
        if account.tls:
            endpoint = wrapClientTLS(connection_creator(tls_config(account), account.host),
                                     endpoint)
        client: _Client = await self._step("connect", connect_protocol(endpoint, _Client()))
        client.tls_pending = account.tls
        done = False
        try:
            if account.start_tls:
                await self._start_tls(client)
            if account.bind_dn:
                await self._bind(client)
            users = await self._search(client, "users", account.user_base_dn,
                                       self._user_filter, self._user_attributes())
            groups = await self._search(client, "groups", account.group_base_dn,
                                        self._group_filter, self._group_attributes())
            done = True
        finally:
            if done and client.connected:
                ldap_wire.unbind(client)
                client.transport.loseConnection()
            elif client.transport is not None:
                client.transport.abortConnection()
        return build_directory(self._users(users), self._groups(groups))

    async def _start_tls(self, client: _Client) -> None:
        code, message = await self._step("StartTLS", Deferred.fromCoroutine(
            ldap_wire.start_tls_request(client)), client)
        if code != ldap_wire.SUCCESS:
            raise self._fail("StartTLS", f"the server refused ({ldap_wire.result_name(code)}"
                             f"{': ' + message if message else ''}); is TLS configured "
                             "on the server?")
        client.tls_pending = True
        client.transport.startTLS(connection_creator(tls_config(self.account),
                                                     self.account.host))

    async def _bind(self, client: _Client) -> None:
        operation = f"bind as {self.account.bind_dn}"
        code, message = await self._step(operation, Deferred.fromCoroutine(
            ldap_wire.simple_bind(client, self.account.bind_dn, self.account.password)),
            client)
        if code == ldap_wire.INVALID_CREDENTIALS:
            raise self._fail(operation, "invalid credentials: wrong bind_dn or password")
        if code != ldap_wire.SUCCESS:
            raise self._fail(operation, f"{ldap_wire.result_name(code)}"
                             f"{': ' + message if message else ''}")

    async def _search(self, client: _Client, what: str, base: str, filter_wire: Any,
                      attributes: list[str]) -> list[ldap_wire.Entry]:
        operation = f"search {what} under {base}"
        entries: list[ldap_wire.Entry] = []
        cookie = b""
        while True:
            try:
                page_done = ldap_wire.search_page(client, base, filter_wire, attributes,
                                                  self.account.page_size, cookie, entries)
            except Exception as exc:  # ldaptor raises when the connection is already gone
                raise self._fail(operation, _reason(exc)) from exc
            page: ldap_wire.Page = await self._step(operation, page_done, client)
            if page.result_code != ldap_wire.SUCCESS:
                raise self._fail(operation, self._search_reason(what, page, len(entries)))
            if not (self.account.page_size and page.cookie):
                return entries
            cookie = page.cookie

    def _search_reason(self, what: str, page: ldap_wire.Page, count: int) -> str:
        code = page.result_code
        said = f" ({page.message})" if page.message else ""
        if code == ldap_wire.NO_SUCH_OBJECT:
            field = "user_base_dn" if what == "users" else "group_base_dn"
            return (f"noSuchObject{said}: the base DN does not exist, or the account may not "
                    f"see it; check {field}")
        if code in (ldap_wire.SIZE_LIMIT_EXCEEDED, ldap_wire.ADMIN_LIMIT_EXCEEDED):
            who = self.account.bind_dn or "anonymous"
            return (f"{ldap_wire.result_name(code)} after {count} {what}: the server's limit "
                    "would make the directory incomplete, so nothing is used; allow the "
                    f"account ({who}) to read all entries (OpenLDAP: limits "
                    f'dn.exact="{who}" size.prtotal=unlimited)')
        if code == ldap_wire.INSUFFICIENT_ACCESS:
            return f"insufficientAccessRights{said}: the account may not search there"
        return f"{ldap_wire.result_name(code)}{said}"

    def _user_attributes(self) -> list[str]:
        a = self.account
        return list(dict.fromkeys([a.user_id_attribute, "uid", a.user_email_attribute,
                                   *a.user_name_attributes]))

    def _group_attributes(self) -> list[str]:
        a = self.account
        return list(dict.fromkeys([a.group_name_attribute, a.group_email_attribute,
                                   *a.member_attributes]))

    def _users(self, entries: list[ldap_wire.Entry]) -> list[UserEntry]:
        a = self.account
        return [UserEntry(dn=e.dn, id=e.first(a.user_id_attribute),
                          email=e.first(a.user_email_attribute),
                          name=e.first(*a.user_name_attributes), uid=e.first("uid"))
                for e in entries if e.first(a.user_id_attribute)]

    def _groups(self, entries: list[ldap_wire.Entry]) -> list[GroupEntry]:
        a = self.account
        by_uid = [m for m in a.member_attributes if m.lower() == "memberuid"]
        by_dn = [m for m in a.member_attributes if m.lower() != "memberuid"]
        return [GroupEntry(dn=e.dn, name=e.first(a.group_name_attribute) or e.dn,
                           email=e.first(a.group_email_attribute),
                           member_dns=tuple(v for m in by_dn for v in e.all(m)),
                           member_uids=tuple(v for m in by_uid for v in e.all(m)))
                for e in entries]

