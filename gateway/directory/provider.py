"""The directory-provider interface, and the provider a service account describes."""

from __future__ import annotations

from typing import Any, Protocol

from twisted.internet.defer import Deferred

from gateway.config.service_account import Read, parse_service_account
from gateway.directory.model import Directory


class DirectoryProvider(Protocol):
    """Reads a whole directory. ``fetch`` is cancellable: cancelling the Deferred (as
    ``addTimeout`` does) closes the connection at once. It fails with
    :class:`~gateway.directory.model.DirectoryError` for anything an operator must fix."""

    name: str

    def fetch(self) -> Deferred[Directory]: ...


def provider_for(service_account: str, reactor: Any,
                 read: Read | None = None) -> DirectoryProvider | None:
    """The provider ``idp_service_account`` describes, or None when it describes no
    directory this version reads (group data then comes from the identity provider's
    ``groups`` claim). Raises ValueError (``ServiceAccountError``) naming the field when
    it describes LDAP but is invalid. ``read`` reads ``password_file``/``ca_file``."""
    account = (parse_service_account(service_account) if read is None
               else parse_service_account(service_account, read))
    if account is None:
        return None
    from gateway.directory.ldap import LDAPProvider  # ldaptor only when LDAP is used

    return LDAPProvider(account, reactor)
