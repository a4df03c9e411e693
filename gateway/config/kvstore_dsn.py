"""``databroker_storage_connection_string``: every form of the reference, parsed.

``kvstore://[user:pass@]host:port/[db]``,
``kvstore+sentinel://[:password@]host:port[,host2:port2,...]/[master_name[/db]][?param=value...]``,
``kvstore+cluster://[user:pass@]host:port[,...]/[?param=value...]``, and the TLS forms
``kvstores://``, ``kvstores+sentinel://``, ``kvstores+cluster://``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote


class BadConnectionString(ValueError):
    """Says what is wrong without echoing the password."""


@dataclass(frozen=True)
class KVSettings:
    mode: str  # standalone, sentinel or cluster
    tls: bool
    addresses: tuple[tuple[str, int], ...]
    username: str = ""
    password: str = ""
    db: int = 0
    master_name: str = ""
    params: dict[str, str] = field(default_factory=dict)


_SCHEMES = {
    "kvstore": ("standalone", False), "kvstores": ("standalone", True),
    "kvstore+sentinel": ("sentinel", False), "kvstores+sentinel": ("sentinel", True),
    "kvstore+cluster": ("cluster", False), "kvstores+cluster": ("cluster", True),
}


def parse_dsn(dsn: str) -> KVSettings:
    scheme, sep, rest = dsn.partition("://")
    if not sep or scheme not in _SCHEMES:
        raise BadConnectionString(
            f"unsupported scheme {scheme or '(none)'!r}; use " + ", ".join(
                f"{s}://" for s in _SCHEMES))
    mode, tls = _SCHEMES[scheme]
    rest, _, query = rest.partition("?")
    authority, _, path = rest.partition("/")
    userinfo, at, hosts = authority.rpartition("@")
    if not at:
        hosts, userinfo = authority, ""
    username, _, password = userinfo.partition(":")
    addresses = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon or not port.isdigit() or not host:
            raise BadConnectionString(f"{scheme}:// needs host:port entries, got {item!r}")
        addresses.append((host.strip("[]"), int(port)))
    params = {k: v[0] for k, v in parse_qs(query).items()}
    db = 0
    master = ""
    parts = [p for p in path.split("/") if p]
    if mode == "sentinel":
        if not parts:
            raise BadConnectionString("kvstore+sentinel:// needs the master name as its path")
        master = unquote(parts[0])
        parts = parts[1:]
    elif mode == "cluster" and parts:
        raise BadConnectionString("kvstore+cluster:// takes no database number")
    if parts:
        if not parts[0].isdigit():
            raise BadConnectionString(f"database must be a number, got {parts[0]!r}")
        db = int(parts[0])
    return KVSettings(mode, tls, tuple(addresses), unquote(username), unquote(password), db,
                      master, params)
