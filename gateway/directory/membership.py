"""Group membership as a pure function: raw entries in, :class:`Directory` out.

A group's members are DNs (``member``, ``uniqueMember``) or user names (posixGroup
``memberUid``). A member DN that is itself a group nests that group: its members belong
to the outer group too, at any depth; membership cycles are harmless (each group is
visited once per walk). DNs are compared case-insensitively, ignoring spaces around
``,`` and ``=`` and a ``uniqueMember`` UID suffix (``#'0101'B``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.directory.model import Directory, DirectoryGroup, DirectoryUser

_UNIQUE_SUFFIX = re.compile(r"#'[01]*'B$")
_SPACES_AROUND = re.compile(r"(?<!\\)\s*([,=+])\s*")


@dataclass(frozen=True)
class UserEntry:
    """A user as read: ``uid`` is what posixGroup ``memberUid`` values refer to."""

    dn: str
    id: str
    email: str
    name: str
    uid: str = ""


@dataclass(frozen=True)
class GroupEntry:
    """A group as read: member DNs and member user names (``memberUid``)."""

    dn: str
    name: str
    email: str = ""
    member_dns: tuple[str, ...] = ()
    member_uids: tuple[str, ...] = ()


def normalize_dn(dn: str) -> str:
    """A comparison key for a DN (not a full RFC 4514 canonical form, which would need
    the schema's matching rules; case and spacing are what differ in practice)."""
    return _SPACES_AROUND.sub(r"\1", _UNIQUE_SUFFIX.sub("", dn.strip())).lower()


def build_directory(users: Iterable[UserEntry], groups: Iterable[GroupEntry]) -> Directory:
    """Users with their transitive groups, and the groups."""
    group_list = list(groups)
    by_dn = {normalize_dn(g.dn): g for g in group_list}
    # parents[g] = groups that directly contain group g
    parents: dict[str, set[str]] = {key: set() for key in by_dn}
    direct_by_dn: dict[str, set[str]] = {}
    direct_by_uid: dict[str, set[str]] = {}
    for key, group in by_dn.items():
        for member in group.member_dns:
            member_key = normalize_dn(member)
            if member_key in by_dn:
                parents[member_key].add(key)
            else:
                direct_by_dn.setdefault(member_key, set()).add(key)
        for uid in group.member_uids:
            direct_by_uid.setdefault(uid, set()).add(key)
    closures: dict[str, frozenset[str]] = {}

    def closure(start: str) -> frozenset[str]:
        """``start`` and every group that contains it, directly or not."""
        found = closures.get(start)
        if found is None:
            seen = {start}
            todo = [start]
            while todo:
                for parent in parents[todo.pop()]:
                    if parent not in seen:
                        seen.add(parent)
                        todo.append(parent)
            found = closures[start] = frozenset(seen)
        return found

    out_users = []
    for user in users:
        direct = direct_by_dn.get(normalize_dn(user.dn), set())
        if user.uid:
            direct = direct | direct_by_uid.get(user.uid, set())
        keys: set[str] = set()
        for key in direct:
            keys |= closure(key)
        out_users.append(DirectoryUser(id=user.id, email=user.email, name=user.name,
                                       group_ids=tuple(sorted(by_dn[k].dn for k in keys))))
    return Directory(
        users=tuple(out_users),
        groups=tuple(DirectoryGroup(id=g.dn, name=g.name, email=g.email)
                     for g in by_dn.values()),
    )
