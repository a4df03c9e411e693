"""A private OpenLDAP ``slapd`` on loopback for directory-sync tests.

:func:`slapd` writes a ``slapd.conf`` under ``tmp_path``, loads an LDIF into a fresh mdb
database with ``slapadd`` (offline, fast even for thousands of entries), converts the
configuration to a cn=config directory with ``slaptest`` (which also checks it), then
runs ``slapd -d stats`` in the foreground as the current user on free 127.0.0.1 ports:
``ldap://`` always (with StartTLS when certificates are given) and ``ldaps://`` on a
second port with certificates.
It is stopped by PID at the end::

    with slapd(tmp_path, sample_ldif()) as server:
        server.url            # ldap://127.0.0.1:PORT
        server.service_dn     # a non-root account allowed to read everything

The data of :func:`sample_ldif` (suffix ``dc=example,dc=test``)::

    ou=people: alice, bob, carol, dave, erin (inetOrgPerson: uid, mail, cn)
    ou=groups: engineering <- backend <- platform     (groupOfNames, nested; no cycle)
               loop-a <-> loop-b                      (groupOfNames, a membership cycle)
               admins                                 (groupOfUniqueNames)
               ops                                    (posixGroup, memberUid)
               everyone  (groupOfNames, contains ops and admins: posix nested in groupOfNames)
    ou=services: cn=gateway (the bind account, password SERVICE_PASSWORD)
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .peers import MissingBinary, find_binary
from .processes import ManagedProcess, ProcessError, free_port, port_open

__all__ = [
    "SERVICE_PASSWORD",
    "SUFFIX",
    "Slapd",
    "people_ldif",
    "sample_ldif",
    "slapd",
]

SUFFIX = "dc=example,dc=test"
ROOT_DN = f"cn=admin,{SUFFIX}"
ROOT_PASSWORD = "root-secret"
SERVICE_DN = f"cn=gateway,ou=services,{SUFFIX}"
SERVICE_PASSWORD = "gateway-secret"
INSTALL_HINT = "apt-get install -y slapd ldap-utils"
SCHEMAS = ("core", "cosine", "nis", "inetorgperson")
PORT_ATTEMPTS = 3


@dataclass(frozen=True)
class Slapd:
    """A running private slapd."""

    url: str
    port: int
    ldaps_url: str | None
    ldaps_port: int | None
    process: ManagedProcess
    suffix: str = SUFFIX
    root_dn: str = ROOT_DN
    root_password: str = ROOT_PASSWORD
    service_dn: str = SERVICE_DN
    service_password: str = SERVICE_PASSWORD


def _entry(dn: str, *lines: str) -> str:
    return "\n".join((f"dn: {dn}", *lines)) + "\n"


def _person(uid: str, name: str) -> str:
    return _entry(f"uid={uid},ou=people,{SUFFIX}", "objectClass: inetOrgPerson",
                  f"uid: {uid}", f"cn: {name}", f"sn: {name.split()[-1]}",
                  f"mail: {uid}@example.test")


def _group(name: str, *members: str, kind: str = "groupOfNames") -> str:
    attribute = {"groupOfNames": "member", "groupOfUniqueNames": "uniqueMember"}[kind]
    return _entry(f"cn={name},ou=groups,{SUFFIX}", f"objectClass: {kind}", f"cn: {name}",
                  *(f"{attribute}: {m}" for m in members))


def _user_dn(uid: str) -> str:
    return f"uid={uid},ou=people,{SUFFIX}"


def _group_dn(name: str) -> str:
    return f"cn={name},ou=groups,{SUFFIX}"


def people_ldif(count: int, start: int = 0) -> str:
    """``count`` generated people ``user00000``... (for size-limit and paging tests)."""
    return "\n".join(_person(f"user{i:05d}", f"Generated User{i}")
                     for i in range(start, start + count))


def sample_ldif(extra_people: int = 0) -> str:
    """The base, the service account and the sample users and groups (module docstring)."""
    entries = [
        _entry(SUFFIX, "objectClass: dcObject", "objectClass: organization", "dc: example",
               "o: Example"),
        *(_entry(f"ou={ou},{SUFFIX}", "objectClass: organizationalUnit", f"ou: {ou}")
          for ou in ("people", "groups", "services")),
        _entry(SERVICE_DN, "objectClass: organizationalRole",
               "objectClass: simpleSecurityObject", "cn: gateway",
               f"userPassword: {SERVICE_PASSWORD}"),
        _person("alice", "Alice Liddell"),
        _person("bob", "Bob Builder"),
        _person("carol", "Carol Danvers"),
        _person("dave", "Dave Lister"),
        _person("erin", "Erin Brockovich"),
        _group("engineering", _user_dn("alice"), _group_dn("backend")),
        _group("backend", _user_dn("bob"), _group_dn("platform")),
        _group("platform", _user_dn("carol")),
        _group("loop-a", _group_dn("loop-b")),
        _group("loop-b", _group_dn("loop-a"), _user_dn("erin")),
        _group("admins", _user_dn("dave"), kind="groupOfUniqueNames"),
        _entry(_group_dn("ops"), "objectClass: posixGroup", "cn: ops", "gidNumber: 5000",
               "memberUid: alice", "memberUid: dave"),
        _group("everyone", _group_dn("ops"), _group_dn("admins")),
    ]
    ldif = "\n".join(entries)
    if extra_people:
        ldif += "\n" + people_ldif(extra_people)
    return ldif


def _config(run: Path, *, tls: tuple[Path, Path] | None, size_limit: int | None,
            service_limits: str | None) -> str:
    lines = [f"include /etc/ldap/schema/{name}.schema" for name in SCHEMAS]
    lines += [
        f"pidfile {run / 'slapd.pid'}",
        f"argsfile {run / 'slapd.args'}",
        "modulepath /usr/lib/ldap",
        "moduleload back_mdb",
    ]
    if tls is not None:
        cert, key = tls
        lines += [f"TLSCertificateFile {cert}", f"TLSCertificateKeyFile {key}"]
    if size_limit is not None:
        lines.append(f"sizelimit {size_limit}")
    lines += [
        "database mdb",
        "maxsize 268435456",
        f'suffix "{SUFFIX}"',
        f'rootdn "{ROOT_DN}"',
        f"rootpw {ROOT_PASSWORD}",
        f"directory {run / 'db'}",
        *([f'limits dn.exact="{SERVICE_DN}" {service_limits}'] if service_limits else []),
        # the service account may read everything but passwords; anonymous sees nothing
        "access to attrs=userPassword by anonymous auth by * none",
        f'access to * by dn.exact="{SERVICE_DN}" read by * none',
    ]
    return "\n".join(lines) + "\n"


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise ProcessError(f"{what} failed ({done.returncode}): {argv!r}\n"
                           f"{done.stdout}\n{done.stderr}")


@contextlib.contextmanager
def slapd(
    tmp_path: Path,
    ldif: str,
    *,
    tls: tuple[Path, Path] | None = None,
    size_limit: int | None = None,
    service_limits: str | None = None,
    timeout: float = 15.0,
) -> Iterator[Slapd]:
    """Run a private slapd holding ``ldif``. ``tls`` = (certificate chain PEM, key PEM)
    enables StartTLS on the ldap:// port and adds an ldaps:// port. ``size_limit`` sets
    slapd's global ``sizelimit`` (its default is 500 entries per search); ``service_limits``
    adds ``limits`` for the service account (e.g. ``size.prtotal=unlimited``: paged
    searches may return more than the size limit in total, pages stay under it)."""
    binaries = {}
    for name in ("slapd", "slaptest", "slapadd"):
        found = find_binary(name)
        if found is None:
            raise MissingBinary(name, INSTALL_HINT)
        binaries[name] = found
    run = Path(tmp_path) / "slapd"
    run.mkdir(parents=True)
    (run / "db").mkdir()
    (run / "slapd.d").mkdir()
    (run / "slapd.conf").write_text(_config(run, tls=tls, size_limit=size_limit,
                                                    service_limits=service_limits))
    (run / "data.ldif").write_text(ldif)
    config_dir = str(run / "slapd.d")
    # slapadd reads slapd.conf and creates the database; slaptest then converts the
    # (checked) configuration to cn=config, which it only writes once the database opens
    _run([binaries["slapadd"], "-f", str(run / "slapd.conf"), "-b", SUFFIX,
          "-l", str(run / "data.ldif")], "slapadd (loading the LDIF)")
    _run([binaries["slaptest"], "-f", str(run / "slapd.conf"), "-F", config_dir],
         "slaptest (config conversion)")
    for attempt in range(1, PORT_ATTEMPTS + 1):
        port = free_port()
        ldaps_port = free_port() if tls is not None else None
        urls = [f"ldap://127.0.0.1:{port}/"]
        if ldaps_port is not None:
            urls.append(f"ldaps://127.0.0.1:{ldaps_port}/")
        proc = ManagedProcess([binaries["slapd"], "-F", config_dir, "-h", " ".join(urls),
                               "-d", "stats"], log_dir=run, name=f"slapd-{port}").start()
        try:
            proc.wait_ready(lambda p=port, s=ldaps_port: port_open("127.0.0.1", p) and (
                s is None or port_open("127.0.0.1", s)), timeout)
        except ProcessError:
            proc.stop()
            if attempt < PORT_ATTEMPTS and "Address already in use" in proc.log_text():
                continue
            raise
        except BaseException:
            proc.stop()
            raise
        break
    try:
        yield Slapd(url=f"ldap://127.0.0.1:{port}", port=port,
                    ldaps_url=f"ldaps://127.0.0.1:{ldaps_port}" if ldaps_port else None,
                    ldaps_port=ldaps_port, process=proc)
    finally:
        proc.stop()
