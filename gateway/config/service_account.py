"""``idp_service_account``: which directory to read, and how.

The setting holds base64 of a small JSON or YAML object (the plain JSON/YAML text is
accepted too: it always contains ``{`` or ``: ``, which base64 never does). An object
with ``type: ldap``, or without ``type`` but with an ``ldap://``/``ldaps://`` ``url`` or
any of ``bind_dn``, ``base_dn``, ``user_base_dn``, ``group_base_dn``, describes an LDAP
directory; anything else (another provider's credentials) is not ours and leaves group
data to the identity provider's ``groups`` claim.

LDAP fields::

    type                  ldap (optional)
    url                   ldap://host[:389] or ldaps://host[:636] (required)
    bind_dn               DN of the account to bind as (simple bind); unset: anonymous
    password              its password (or password_file: a file holding it)
    base_dn               where users and groups live, unless set apart by
    user_base_dn          ... the subtree searched for users
    group_base_dn         ... the subtree searched for groups
    user_filter           default (objectClass=inetOrgPerson)
    group_filter          default (|(objectClass=groupOfNames)
                                    (objectClass=groupOfUniqueNames)(objectClass=posixGroup))
    user_id_attribute     default uid (the user's id; users without it are skipped)
    user_email_attribute  default mail
    user_name_attributes  default [displayName, cn] (the first one present)
    group_name_attribute  default cn
    group_email_attribute default mail
    member_attributes     default [member, uniqueMember, memberUid]; memberUid values
                          are user names (matched against the user's uid), the others
                          DNs (of users, or of groups, which nests them)
    page_size             default 500 (RFC 2696 paged results); 0 turns paging off
    start_tls             default false; upgrade ldap:// with StartTLS
    ca                    PEM of the CA(s) to trust instead of the system roots
                          (or ca_file: a file holding them)
    tls_server_name       name expected in the server certificate (default: url's host)
    tls_skip_verify       default false; accept any certificate (tests only)

A group's id is its DN and its name the ``group_name_attribute`` value: policies may use
either. Errors name the field: ``idp_service_account: url: must be ldap:// or ldaps://``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml

from gateway.config.ldap_filter import parse_filter
from gateway.config.material import Pem, check_pem
from gateway.config.values import decode_base64

SETTING = "idp_service_account"
DEFAULT_USER_FILTER = "(objectClass=inetOrgPerson)"
DEFAULT_GROUP_FILTER = ("(|(objectClass=groupOfNames)(objectClass=groupOfUniqueNames)"
                        "(objectClass=posixGroup))")
DEFAULT_PAGE_SIZE = 500
_LDAP_HINTS = ("bind_dn", "base_dn", "user_base_dn", "group_base_dn")
_BASE64 = re.compile(r"[A-Za-z0-9+/=_\-\s]+")
_ATTRIBUTE = re.compile(r"[A-Za-z][A-Za-z0-9-]*(;[A-Za-z0-9-]+)*|[0-9]+(\.[0-9]+)+")
_MAX_PAGE_SIZE = 100_000

Read = Callable[[str], bytes]


class ServiceAccountError(ValueError):
    """``idp_service_account`` describes LDAP but something in it is wrong."""

    def __init__(self, field_name: str, reason: str) -> None:
        self.field = field_name
        self.reason = reason
        where = f"{field_name}: " if field_name else ""
        super().__init__(f"{SETTING}: {where}{reason}")

    @property
    def detail(self) -> str:
        """The message without the setting's name (``field: reason``)."""
        return f"{self.field}: {self.reason}" if self.field else self.reason


@dataclass(frozen=True)
class LDAPAccount:
    """A checked LDAP service account. ``password`` never appears in its repr."""

    url: str
    host: str
    port: int
    tls: bool
    bind_dn: str
    password: str = field(repr=False)
    user_base_dn: str
    group_base_dn: str
    user_filter: str = DEFAULT_USER_FILTER
    group_filter: str = DEFAULT_GROUP_FILTER
    user_id_attribute: str = "uid"
    user_email_attribute: str = "mail"
    user_name_attributes: tuple[str, ...] = ("displayName", "cn")
    group_name_attribute: str = "cn"
    group_email_attribute: str = "mail"
    member_attributes: tuple[str, ...] = ("member", "uniqueMember", "memberUid")
    page_size: int = DEFAULT_PAGE_SIZE
    start_tls: bool = False
    ca: bytes | None = None
    tls_server_name: str = ""
    tls_skip_verify: bool = False


_FIELDS = frozenset({
    "type", "url", "bind_dn", "password", "password_file", "base_dn", "user_base_dn",
    "group_base_dn", "user_filter", "group_filter", "user_id_attribute",
    "user_email_attribute", "user_name_attributes", "group_name_attribute",
    "group_email_attribute", "member_attributes", "page_size", "start_tls", "ca", "ca_file",
    "tls_server_name", "tls_skip_verify",
})


def _read_file(location: str) -> bytes:
    with open(location, "rb") as handle:
        return handle.read(1024 * 1024)


def decode(text: str) -> Mapping[str, Any] | None:
    """The object in ``text`` (base64 of JSON/YAML, or plain JSON/YAML), or None when it
    holds no object. Raises :class:`ServiceAccountError` for unparseable text that
    mentions an LDAP URL (a broken LDAP account must not pass silently)."""
    stripped = text.strip()
    if not stripped:
        return None
    if _BASE64.fullmatch(stripped):
        try:
            stripped = decode_base64("".join(stripped.split())).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
    try:
        value = json.loads(stripped)
    except ValueError:
        try:
            value = yaml.safe_load(stripped)
        except yaml.YAMLError as exc:
            if "ldap://" in stripped or "ldaps://" in stripped:
                reason = " ".join(str(exc).split())
                raise ServiceAccountError("", f"is neither valid JSON nor YAML: {reason}"
                                          ) from None
            return None
    return value if isinstance(value, dict) else None


def describes_ldap(account: Mapping[str, Any]) -> bool:
    if "type" in account:
        return str(account["type"]).lower() == "ldap"
    url = account.get("url")
    if isinstance(url, str) and url.lower().startswith(("ldap://", "ldaps://")):
        return True
    return any(key in account for key in _LDAP_HINTS)


def parse_service_account(text: str, read: Read = _read_file) -> LDAPAccount | None:
    """The LDAP account ``text`` describes, None if it describes none; ``read`` reads the
    ``*_file`` fields. Raises :class:`ServiceAccountError` naming the bad field."""
    account = decode(text)
    if account is None or not describes_ldap(account):
        return None
    return _Fields(account, read).ldap()


class _Fields:
    """Typed access to the object's fields; every error names the field."""

    def __init__(self, values: Mapping[str, Any], read: Read) -> None:
        self.values = values
        self.read = read

    def text(self, name: str, default: str = "") -> str:
        value = self.values.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise ServiceAccountError(name, f"must be a string, got {type(value).__name__}")
        return value.strip()

    def flag(self, name: str) -> bool:
        value = self.values.get(name, False)
        if not isinstance(value, bool):
            raise ServiceAccountError(name, f"must be true or false, got {value!r}")
        return value

    def attribute(self, name: str, default: str) -> str:
        value = self.text(name, default)
        if not _ATTRIBUTE.fullmatch(value):
            raise ServiceAccountError(name, f"{value!r} is not an attribute name")
        return value

    def attributes(self, name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = self.values.get(name)
        if value is None:
            return default
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(
                isinstance(v, str) for v in items):
            raise ServiceAccountError(name, "must be an attribute name or a non-empty list "
                                      "of them")
        for item in items:
            if not _ATTRIBUTE.fullmatch(item):
                raise ServiceAccountError(name, f"{item!r} is not an attribute name")
        return tuple(items)

    def filter(self, name: str, default: str) -> str:
        value = self.text(name, default)
        try:
            parse_filter(value)
        except ValueError as exc:
            raise ServiceAccountError(name, f"{value!r} is {exc}") from None
        return value if value.startswith("(") else f"({value})"

    def inline_or_file(self, name: str) -> tuple[str, bytes | None]:
        """(the field that was set, its bytes) for ``name`` / ``name_file``."""
        inline, location = self.text(name), self.text(f"{name}_file")
        if inline and location:
            raise ServiceAccountError(f"{name}_file", f"set either {name} or {name}_file, "
                                      "not both")
        if location:
            try:
                return f"{name}_file", self.read(location)
            except OSError as exc:
                raise ServiceAccountError(f"{name}_file", f"cannot read "
                                          f"{exc.filename or location}: "
                                          f"{exc.strerror or exc}") from None
        return name, inline.encode() if inline else None

    def ldap(self) -> LDAPAccount:
        unknown = sorted(set(self.values) - _FIELDS)
        if unknown:
            raise ServiceAccountError(unknown[0], "unknown field (known: "
                                      + ", ".join(sorted(_FIELDS)) + ")")
        url, host, port, tls = self.url()
        bind_dn = self.text("bind_dn")
        where, raw = self.inline_or_file("password")
        password = raw.decode("utf-8", "replace").rstrip("\r\n") if raw else ""
        if bind_dn and not password:
            raise ServiceAccountError("password", "required with bind_dn (or password_file)"
                                      "; an empty password would be an unauthenticated "
                                      "bind")
        if password and not bind_dn:
            raise ServiceAccountError("bind_dn", f"required with {where}")
        base = self.text("base_dn")
        bases = {k: self.text(k, base) for k in ("user_base_dn", "group_base_dn")}
        for key, value in bases.items():
            if not value:
                raise ServiceAccountError(key, "required (or base_dn for both)")
        page_size = self.values.get("page_size", DEFAULT_PAGE_SIZE)
        if (not isinstance(page_size, int) or isinstance(page_size, bool)
                or not 0 <= page_size <= _MAX_PAGE_SIZE):
            raise ServiceAccountError("page_size", f"must be a whole number from 0 (no "
                                      f"paging) to {_MAX_PAGE_SIZE}, got {page_size!r}")
        start_tls = self.flag("start_tls")
        if start_tls and tls:
            raise ServiceAccountError("start_tls", "only with ldap:// (ldaps:// is TLS from "
                                      "the first byte)")
        ca_field, ca = self.inline_or_file("ca")
        if ca is not None and check_pem(ca, Pem.CERTS) is not None:
            raise ServiceAccountError(ca_field, "holds no PEM certificate")
        skip_verify = self.flag("tls_skip_verify")
        server_name = self.text("tls_server_name")
        if not (tls or start_tls):
            tls_fields: tuple[tuple[str, object], ...] = (
                (ca_field, ca), ("tls_server_name", server_name),
                ("tls_skip_verify", skip_verify))
            for name, setting in tls_fields:
                if setting:
                    raise ServiceAccountError(name, "has no effect with ldap:// unless start_tls "
                                              "is true")
        return LDAPAccount(
            url=url, host=host, port=port, tls=tls, bind_dn=bind_dn, password=password,
            user_base_dn=bases["user_base_dn"], group_base_dn=bases["group_base_dn"],
            user_filter=self.filter("user_filter", DEFAULT_USER_FILTER),
            group_filter=self.filter("group_filter", DEFAULT_GROUP_FILTER),
            user_id_attribute=self.attribute("user_id_attribute", "uid"),
            user_email_attribute=self.attribute("user_email_attribute", "mail"),
            user_name_attributes=self.attributes("user_name_attributes",
                                                 ("displayName", "cn")),
            group_name_attribute=self.attribute("group_name_attribute", "cn"),
            group_email_attribute=self.attribute("group_email_attribute", "mail"),
            member_attributes=self.attributes("member_attributes",
                                              ("member", "uniqueMember", "memberUid")),
            page_size=page_size, start_tls=start_tls, ca=ca, tls_server_name=server_name,
            tls_skip_verify=skip_verify,
        )

    def url(self) -> tuple[str, str, int, bool]:
        """(url without trailing slash, host, port, TLS from the start)."""
        value = self.text("url")
        if not value:
            raise ServiceAccountError("url", "required (ldap://host:port or ldaps://host:port)")
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError as exc:
            raise ServiceAccountError("url", f"{value!r} is not a URL: {exc}") from None
        scheme = parts.scheme.lower()
        if scheme not in ("ldap", "ldaps"):
            raise ServiceAccountError("url", "must be ldap:// or ldaps://")
        if not parts.hostname:
            raise ServiceAccountError("url", f"{value!r} names no host")
        if parts.username or parts.password:
            raise ServiceAccountError("url", "must not hold credentials; use bind_dn and "
                                      "password")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ServiceAccountError("url", "only scheme, host and port are used; put base "
                                      "DNs and filters in their own fields")
        tls = scheme == "ldaps"
        port = port or (636 if tls else 389)
        host_in_url = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        return f"{scheme}://{host_in_url}:{port}", parts.hostname, port, tls
