"""The SSH user name a person types: ``LOGIN@ROUTE`` (or ``ROUTE`` alone).

Parsed before anything else is known about the connection, so it is strict and never
says whether a route exists: that is only told after authentication.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_NAME = 256
# what OpenSSH and useradd accept as a login (POSIX portable names, plus $ for machine
# accounts), and route names as DNS-like labels
_LOGIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")
_ROUTE = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,62}[a-z0-9])?")


class BadUserName(ValueError):
    """The user name is not ``LOGIN@ROUTE`` or ``ROUTE``."""


@dataclass(frozen=True, slots=True)
class LoginTarget:
    """Who to log in as (``""``: not named) on which route."""

    login: str
    route: str


def parse_login(raw: bytes, route: str) -> LoginTarget:
    """The user name of a connection whose route is already known (the inner
    connection of a jump, ``ssh -J gateway root@db``): a login name only."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise BadUserName("the user name must be ASCII") from None
    if not _LOGIN.fullmatch(text):
        raise BadUserName(f"{text[:64]!r} is not a login name")
    return LoginTarget(text, route)


def parse_user(raw: bytes) -> LoginTarget:
    """``alice@db`` -> LoginTarget("alice", "db"); ``db`` -> LoginTarget("", "db"). The route is
    after the last ``@``; names are ASCII, route names lower-cased."""
    if len(raw) > MAX_NAME:
        raise BadUserName("the user name is too long")
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise BadUserName("the user name must be ASCII") from None
    login, at, route = text.rpartition("@")
    route = route.lower()
    if not _ROUTE.fullmatch(route):
        raise BadUserName("name the route as LOGIN@ROUTE")
    if at and not _LOGIN.fullmatch(login):
        raise BadUserName(f"{login!r} is not a login name")
    return LoginTarget(login, route)
