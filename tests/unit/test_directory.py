"""Directory sync without sockets: the service account (base64 JSON/YAML, each error naming
its field) and group membership as a pure function (nesting, cycles, posix memberUid)."""

from __future__ import annotations

import base64
import json

import trustme
import yaml
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.service_account import (
    DEFAULT_GROUP_FILTER,
    LDAPAccount,
    ServiceAccountError,
    parse_service_account,
)
from gateway.directory import DirectoryError, provider_for
from gateway.directory.ldap import tls_config
from gateway.directory.membership import GroupEntry, UserEntry, build_directory, normalize_dn
from gateway.directory.model import DirectoryGroup

BASE = {"url": "ldap://ldap.example.test", "bind_dn": "cn=gateway,dc=example,dc=test",
        "password": "s3cret-pw", "base_dn": "dc=example,dc=test"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def parse(**fields: object) -> LDAPAccount:
    account = parse_service_account(b64(json.dumps({**BASE, **fields})))
    assert account is not None
    return account


class ServiceAccountTests(SynchronousTestCase):
    def error(self, fields: dict[str, object], read: object = None) -> ServiceAccountError:
        text = b64(json.dumps(fields))
        with self.assertRaises(ServiceAccountError) as caught:
            if read is None:
                parse_service_account(text)
            else:
                parse_service_account(text, read)  # type: ignore[arg-type]
        return caught.exception

    def test_base64_json(self) -> None:
        account = parse()
        self.assertEqual((account.url, account.host, account.port, account.tls),
                         ("ldap://ldap.example.test:389", "ldap.example.test", 389, False))
        self.assertEqual((account.bind_dn, account.password),
                         ("cn=gateway,dc=example,dc=test", "s3cret-pw"))
        self.assertEqual((account.user_base_dn, account.group_base_dn),
                         ("dc=example,dc=test", "dc=example,dc=test"))
        self.assertEqual(account.user_filter, "(objectClass=inetOrgPerson)")
        self.assertEqual(account.group_filter, DEFAULT_GROUP_FILTER)
        self.assertEqual(account.member_attributes, ("member", "uniqueMember", "memberUid"))
        self.assertEqual(account.page_size, 500)

    def test_base64_yaml_with_every_field(self) -> None:
        ca = trustme.CA().cert_pem.bytes().decode()
        text = yaml.safe_dump({
            "type": "ldap", "url": "ldaps://dir.example.test:1636", "bind_dn": "cn=x",
            "password": "pw", "user_base_dn": "ou=people,dc=x", "group_base_dn": "ou=g,dc=x",
            "user_filter": "objectClass=person", "group_filter": "(objectClass=groupOfNames)",
            "user_id_attribute": "sAMAccountName", "user_email_attribute": "userPrincipalName",
            "user_name_attributes": "displayName", "group_name_attribute": "name",
            "group_email_attribute": "mail", "member_attributes": ["member"],
            "page_size": 1000, "ca": ca, "tls_server_name": "dir.internal",
            "tls_skip_verify": False})
        account = parse_service_account(b64(text))
        assert account is not None
        self.assertEqual((account.url, account.port, account.tls),
                         ("ldaps://dir.example.test:1636", 1636, True))
        self.assertEqual((account.user_base_dn, account.group_base_dn),
                         ("ou=people,dc=x", "ou=g,dc=x"))
        self.assertEqual(account.user_filter, "(objectClass=person)")  # parentheses added
        self.assertEqual(account.user_name_attributes, ("displayName",))
        self.assertEqual(account.ca, ca.strip().encode())
        tls = tls_config(account)
        self.assertEqual((tls.server_name, tls.skip_verify, tls.custom_ca, tls.alpn),
                         ("dir.internal", False, ca.strip().encode(), ()))

    def test_plain_json_and_yaml_are_accepted(self) -> None:
        self.assertEqual(parse_service_account(json.dumps(BASE)), parse())
        self.assertEqual(parse_service_account(yaml.safe_dump(BASE)), parse())

    def test_ldaps_default_port(self) -> None:
        self.assertEqual(parse(url="ldaps://dir.example.test").port, 636)

    def test_other_providers_accounts_are_not_ldap(self) -> None:
        google = {"type": "service_account", "client_email": "x@y", "private_key": "k"}
        for text in ("", "   ", b64(json.dumps(google)), json.dumps(google),
                     "an-opaque-api-token", b64("not an object"),
                     b64(json.dumps({"url": "https://example.test"}))):
            self.assertIsNone(parse_service_account(text), text)

    def test_errors_name_the_field(self) -> None:
        ca = trustme.CA().cert_pem.bytes().decode()
        cases: list[tuple[dict[str, object], str]] = [
            ({**BASE, "url": "http://ldap.example.test"},
             "idp_service_account: url: must be ldap:// or ldaps://"),
            ({"type": "ldap", "base_dn": "dc=x"}, "idp_service_account: url: required"),
            ({**BASE, "url": "ldap://"}, "idp_service_account: url: "),
            ({**BASE, "url": "ldap://h:99999"}, "idp_service_account: url: "),
            ({**BASE, "url": "ldap://h/dc=x?cn"}, "idp_service_account: url: only scheme"),
            ({**BASE, "password": ""}, "idp_service_account: password: required with bind_dn"),
            ({k: v for k, v in BASE.items() if k != "bind_dn"},
             "idp_service_account: bind_dn: required with password"),
            ({**BASE, "password_file": "/x"},
             "idp_service_account: password_file: set either password or password_file"),
            ({k: v for k, v in BASE.items() if k != "base_dn"},
             "idp_service_account: user_base_dn: required (or base_dn for both)"),
            ({**BASE, "base_dn": "", "user_base_dn": "ou=p"},
             "idp_service_account: group_base_dn: required"),
            ({**BASE, "user_filter": "(&(a=b)"},
             "idp_service_account: user_filter: '(&(a=b)' is not a valid LDAP filter"),
            ({**BASE, "group_filter": "(("}, "idp_service_account: group_filter: "),
            ({**BASE, "user_id_attribute": "u id"},
             "idp_service_account: user_id_attribute: 'u id' is not an attribute name"),
            ({**BASE, "member_attributes": []}, "idp_service_account: member_attributes: "),
            ({**BASE, "start_tls": "yes"},
             "idp_service_account: start_tls: must be true or false"),
            ({**BASE, "url": "ldaps://h", "start_tls": True},
             "idp_service_account: start_tls: only with ldap://"),
            ({**BASE, "ca": ca}, "idp_service_account: ca: has no effect with ldap://"),
            ({**BASE, "tls_skip_verify": True},
             "idp_service_account: tls_skip_verify: has no effect with ldap://"),
            ({**BASE, "start_tls": True, "ca": "not a pem"},
             "idp_service_account: ca: holds no PEM certificate"),
            ({**BASE, "page_size": -1}, "idp_service_account: page_size: must be a whole"),
            ({**BASE, "pasword": "typo"}, "idp_service_account: pasword: unknown field"),
            ({**BASE, "bind_dn": 7}, "idp_service_account: bind_dn: must be a string"),
        ]
        for fields, expected in cases:
            message = str(self.error(fields))
            self.assertTrue(message.startswith(expected), (fields, message))
            self.assertNotIn("s3cret-pw", message)

    def test_unparseable_text_that_mentions_ldap_is_an_error(self) -> None:
        with self.assertRaises(ServiceAccountError) as caught:
            parse_service_account("url: ldap://h\n  bind_dn: [unclosed")
        self.assertIn("is neither valid JSON nor YAML", str(caught.exception))

    def test_files_are_read_with_the_given_reader(self) -> None:
        ca = trustme.CA().cert_pem.bytes()
        files = {"/etc/gateway/ldap-password": b"from-file\n", "/etc/gateway/ca.pem": ca}
        fields = {**{k: v for k, v in BASE.items() if k != "password"}, "start_tls": True,
                  "password_file": "/etc/gateway/ldap-password",
                  "ca_file": "/etc/gateway/ca.pem"}
        account = parse_service_account(json.dumps(fields), files.__getitem__)
        assert account is not None
        self.assertEqual((account.password, account.ca), ("from-file", ca))

        def unreadable(location: str) -> bytes:
            raise FileNotFoundError(2, "No such file or directory", location)

        message = str(self.error(fields, unreadable))
        self.assertEqual(message, "idp_service_account: password_file: cannot read "
                                  "/etc/gateway/ldap-password: No such file or directory")

    def test_password_is_not_in_the_repr(self) -> None:
        self.assertNotIn("s3cret-pw", repr(parse()))

    def test_provider_for(self) -> None:
        reactor = MemoryReactorClock()
        self.assertIsNone(provider_for("", reactor))
        self.assertIsNone(provider_for(b64('{"type": "service_account"}'), reactor))
        provider = provider_for(b64(json.dumps(BASE)), reactor)
        assert provider is not None
        self.assertEqual(provider.name, "ldap")
        self.assertNotIn("s3cret-pw", repr(provider))
        with self.assertRaises(ValueError) as caught:
            provider_for(b64(json.dumps({**BASE, "url": "ftp://x"})), reactor)
        self.assertEqual(str(caught.exception),
                         "idp_service_account: url: must be ldap:// or ldaps://")

    def test_directory_error_message(self) -> None:
        error = DirectoryError("ldap://h:389", "bind as cn=x", "invalid credentials")
        self.assertEqual(str(error), "directory ldap://h:389: bind as cn=x: invalid credentials")


def dn(kind: str, name: str) -> str:
    return f"{'uid' if kind == 'user' else 'cn'}={name},ou={kind}s,dc=example,dc=test"


def user(name: str) -> UserEntry:
    return UserEntry(dn=dn("user", name), id=name, email=f"{name}@example.test",
                     name=name.title(), uid=name)


def group(name: str, *members: str, uids: tuple[str, ...] = ()) -> GroupEntry:
    return GroupEntry(dn=dn("group", name), name=name, member_dns=members, member_uids=uids)


class MembershipTests(SynchronousTestCase):
    def groups_of(self, users: list[UserEntry], groups: list[GroupEntry]) -> dict[str, set[str]]:
        directory = build_directory(users, groups)
        names = {g.id: g.name for g in directory.groups}
        return {u.id: {names[g] for g in u.group_ids} for u in directory.users}

    def test_nested_groups_are_expanded_transitively(self) -> None:
        groups = [group("engineering", dn("user", "alice"), dn("group", "backend")),
                  group("backend", dn("user", "bob"), dn("group", "platform")),
                  group("platform", dn("user", "carol"))]
        self.assertEqual(self.groups_of([user("alice"), user("bob"), user("carol"),
                                         user("dave")], groups), {
            "alice": {"engineering"},
            "bob": {"backend", "engineering"},
            "carol": {"platform", "backend", "engineering"},
            "dave": set(),
        })

    def test_cycles_end(self) -> None:
        groups = [group("a", dn("group", "b"), dn("user", "alice")),
                  group("b", dn("group", "c")),
                  group("c", dn("group", "a"), dn("user", "bob")),
                  group("self", dn("group", "self"), dn("user", "carol"))]
        self.assertEqual(self.groups_of([user("alice"), user("bob"), user("carol")], groups), {
            "alice": {"a", "b", "c"}, "bob": {"a", "b", "c"}, "carol": {"self"}})

    def test_posix_member_uid_and_nesting_into_other_kinds(self) -> None:
        groups = [group("ops", uids=("alice", "nobody")),
                  group("everyone", dn("group", "ops"))]
        self.assertEqual(self.groups_of([user("alice"), user("bob")], groups),
                         {"alice": {"ops", "everyone"}, "bob": set()})

    def test_dns_compare_by_case_spacing_and_unique_member_suffix(self) -> None:
        self.assertEqual(normalize_dn("UID=Alice, OU=Users ,dc=Example,dc=Test#'0101'B"),
                         normalize_dn(dn("user", "alice")))
        self.assertNotEqual(normalize_dn(r"cn=a\,b,dc=x"), normalize_dn("cn=a,b,dc=x"))
        groups = [group("g", "UID=ALICE, OU=USERS, DC=EXAMPLE, DC=TEST#'1'B")]
        self.assertEqual(self.groups_of([user("alice")], groups), {"alice": {"g"}})

    def test_ids_are_dns_sorted_and_groups_are_listed(self) -> None:
        groups = [group("zeta", dn("user", "alice")), group("alpha", dn("user", "alice"))]
        directory = build_directory([user("alice")], groups)
        self.assertEqual(directory.users[0].group_ids, (dn("group", "alpha"),
                                                        dn("group", "zeta")))
        self.assertEqual(set(directory.groups), {DirectoryGroup(dn("group", "zeta"), "zeta"),
                                                 DirectoryGroup(dn("group", "alpha"), "alpha")})
        self.assertEqual(directory.users[0].email, "alice@example.test")
