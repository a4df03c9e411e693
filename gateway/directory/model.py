"""What a directory sync produces: frozen users and groups, and the error a run can end in."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DirectoryGroup:
    """A group. ``id`` is stable (for LDAP: the group's DN); ``name`` is what people call it
    (LDAP: its ``cn``). Policies may name a group by either."""

    id: str
    name: str
    email: str = ""


@dataclass(frozen=True)
class DirectoryUser:
    """A user and every group they belong to, directly or through nested groups
    (``group_ids`` holds :attr:`DirectoryGroup.id` values, sorted)."""

    id: str
    email: str
    name: str
    group_ids: tuple[str, ...]


@dataclass(frozen=True)
class Directory:
    """One complete snapshot of the directory."""

    users: tuple[DirectoryUser, ...]
    groups: tuple[DirectoryGroup, ...]


class DirectoryError(Exception):
    """A sync run failed. The message names the server, the operation and the reason, for
    an operator to act on; it never contains the password."""

    def __init__(self, server: str, operation: str, reason: str) -> None:
        super().__init__(f"directory {server}: {operation}: {reason}")
        self.server = server
        self.operation = operation
        self.reason = reason
