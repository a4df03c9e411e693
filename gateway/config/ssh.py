"""Native SSH: the global keys (host keys, the user CA) and the SSH fields of a route
(the key formats they are written in: ``known_hosts``).

A route ``from: ssh://NAME`` is reached as ``ssh LOGIN@NAME@gateway``; its ``to:
ssh://HOST:PORT`` is the server the gateway logs into with a certificate its user CA
signs. Everything here is parsed once per snapshot, with problems at their key paths.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from gateway.config.errors import Problems
from gateway.config.known_hosts import (
    HostKey,
    known_hosts_name,
    parse_host_ca_line,
    parse_host_key_line,
    parse_key_list,
    parse_revoked_line,
)
from gateway.config.material import Reader
from gateway.config.ssh_krl import Krl, is_krl, parse_krl
from gateway.config.values import parse_bool, parse_duration, parse_list, split_url

DEFAULT_CERTIFICATE_TTL = 300.0
MAX_CERTIFICATE_TTL = 3600.0
SSH_ROUTE_FIELDS: dict[str, str] = {
    "ssh_upstream_host_keys": "The server's host keys: known_hosts lines or `TYPE BASE64`; "
                              "`@revoked HOSTS TYPE BASE64` lines refuse a key "
                              "(ssh:// routes).",
    "ssh_upstream_host_ca": "CAs whose host certificates the server may show instead: "
                            "`TYPE BASE64` or `@cert-authority HOSTS TYPE BASE64` lines, "
                            "and `@revoked` lines (ssh:// routes).",
    "ssh_upstream_host_ca_file": "File form of ssh_upstream_host_ca (a .pub file or "
                                 "known_hosts lines).",
    "ssh_upstream_revoked_keys_file": "Revoked host keys and host certificates: an OpenSSH "
                                      "KRL (ssh-keygen -k) or public keys, one a line, "
                                      "as OpenSSH's RevokedHostKeys (ssh:// routes).",
    "ssh_upstream_host_key_tofu": "Trust the server's first host key and pin it in the "
                                  "databroker (ssh:// routes; off by default).",
    "ssh_allow_port_forwarding": "Allow local port forwarding (ssh -L) through this route "
                                 "(default false).",
    "ssh_certificate_ttl": "Lifetime of the certificate the gateway signs for the server "
                           "(default 5m, at most 1h).",
    "ssh_recording": "Record sessions with a terminal (default: on when ssh_recording_dir "
                     "is set).",
    "ssh_record_input": "Record what the person types too (default false: passwords).",
    "ssh_recording_required": "Close a connection whose recording cannot be written "
                              "(default false: it goes on unrecorded, logged).",
}

SigningKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


@dataclass(frozen=True, slots=True)
class SshRoute:
    """What an ``ssh://`` route adds to a route: where the server is and how it is
    trusted, and what a connection through it may do."""

    name: str
    host: str
    port: int
    host_keys: tuple[HostKey, ...] = ()  # the server's keys and host CAs (``authority``)
    # ``@revoked`` lines and ``ssh_upstream_revoked_keys_file``: kept apart from
    # ``host_keys``, whose being empty is what turns trust on first use on
    revoked: Revocations = field(default_factory=lambda: Revocations())
    trust_on_first_use: bool = False
    allow_port_forwarding: bool = False
    certificate_ttl: float = DEFAULT_CERTIFICATE_TTL
    recording: bool | None = None  # None: on when ssh_recording_dir is set
    record_input: bool = False
    recording_required: bool = False  # fail closed: no recording, no session


@dataclass(frozen=True, slots=True)
class Revocations:
    """What a route refuses whatever else trusts it: keys (``@revoked`` lines, a key
    list) and an OpenSSH KRL. A revoked key is never the server's host key, the key
    of its host certificate, nor the CA of one; the KRL also revokes certificates by
    serial and key id."""

    keys: frozenset[bytes] = frozenset()
    krl: Krl | None = None

    def key(self, blob: bytes) -> bool:
        return blob in self.keys or (self.krl is not None and self.krl.key_revoked(blob))

    def certificate(self, ca_blob: bytes, serial: int, key_id: str) -> bool:
        """By serial or key id (its key and CA are asked of ``key``)."""
        return self.krl is not None and self.krl.certificate_revoked(ca_blob, serial, key_id)


def parse_ssh_route(item: Mapping[str, Any], base: str, name: str,
                    problems: Problems, reader: Reader | None = None) -> SshRoute | None:
    """The SSH fields of route ``base`` (``from: ssh://name``); None after a problem.
    ``reader`` reads ``ssh_upstream_host_ca_file``."""
    before = len(problems.errors)
    target = item.get("to")
    host, port = "", 22
    if not isinstance(target, str):
        problems.error(f"{base}.to", "an ssh:// route needs one upstream, "
                                     "`to: ssh://HOST:PORT`")
    else:
        try:
            parts = split_url(target)
        except ValueError as exc:
            problems.error(f"{base}.to", str(exc))
        else:
            if parts.scheme.lower() != "ssh":
                problems.error(f"{base}.to", f"{target}: an ssh:// route needs an ssh:// "
                                             "upstream")
            if parts.path not in ("", "/") or parts.query or parts.username:
                problems.error(f"{base}.to", f"{target}: must be ssh://HOST[:PORT] only")
            host, port = (parts.hostname or ""), parts.port or 22
    keys: list[HostKey] = []
    ledger = RevocationLedger(host, port)
    for index, line in _setting_lines(item, f"{base}.ssh_upstream_host_keys", problems):
        where = f"{base}.ssh_upstream_host_keys[{index}]"
        try:
            if line.startswith("@revoked"):
                ledger.add(line, where, inline=True)
                continue
            if line.startswith("@cert-authority"):
                entry = parse_host_ca_line(line, host, port)
                if entry is None:
                    raise ValueError(f"its hosts are not {known_hosts_name(host, port)} "
                                     "(the route's to:)")
            else:
                entry = parse_host_key_line(line)
        except ValueError as exc:
            problems.error(where, str(exc))
            continue
        keys.append(entry)
        ledger.trust(entry, where, inline=True)
    authorities = _host_cas(item, base, host, port, reader, problems, ledger)
    keys += [a for a in authorities if a not in keys]
    _revoked_keys_file(item, base, reader, problems, ledger)
    ledger.check_trusted(problems)
    values: dict[str, Any] = {}
    for key, field_name in (("ssh_upstream_host_key_tofu", "trust_on_first_use"),
                            ("ssh_allow_port_forwarding", "allow_port_forwarding"),
                            ("ssh_recording", "recording"),
                            ("ssh_record_input", "record_input"),
                            ("ssh_recording_required", "recording_required")):
        if item.get(key) is not None:
            try:
                values[field_name] = parse_bool(item[key])
            except ValueError as exc:
                problems.error(f"{base}.{key}", str(exc))
    if item.get("ssh_certificate_ttl") is not None:
        try:
            ttl = parse_duration(str(item["ssh_certificate_ttl"]))
        except ValueError as exc:
            problems.error(f"{base}.ssh_certificate_ttl", str(exc))
        else:
            if not 0 < ttl <= MAX_CERTIFICATE_TTL:
                problems.error(f"{base}.ssh_certificate_ttl",
                               f"must be more than 0 and at most 1h, got {ttl:g}s")
            values["certificate_ttl"] = ttl
    if not keys and not values.get("trust_on_first_use"):
        problems.error(f"{base}.ssh_upstream_host_keys",
                       "an ssh:// route needs the server's host keys (known_hosts lines), "
                       "a host CA (ssh_upstream_host_ca), or ssh_upstream_host_key_tofu: "
                       "true to pin the first key it shows")
    elif values.get("trust_on_first_use") and any(k.authority for k in keys):
        problems.error(f"{base}.ssh_upstream_host_key_tofu",
                       "cannot be combined with a host CA: the CA's certificate decides, "
                       "a first key would never be pinned; set one of the two")
    if len(problems.errors) > before:
        return None
    return SshRoute(name=name, host=host, port=port, host_keys=tuple(keys),
                    revoked=Revocations(frozenset(ledger.paths), ledger.krl), **values)


class RevocationLedger:
    """A route's ``@revoked`` lines as they are read, each blob with the key path of its
    first line, and where each trusted key was read, for a key both trusted and
    revoked: in the route's own settings that is a config error naming both lines; when
    a file says either (a fleet's known_hosts, a KRL, which change apart from the
    config) revocation wins, as in OpenSSH, with a warning, since refusing the config
    would keep the running one, which trusts the key."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.paths: dict[bytes, str] = {}
        self.inline: set[bytes] = set()  # revoked in the route's own settings
        self.trusted: dict[bytes, tuple[HostKey, str, bool]] = {}
        self.krl: Krl | None = None
        self.krl_path = ""

    def trust(self, key: HostKey, where: str, inline: bool) -> None:
        self.trusted.setdefault(key.blob, (key, where, inline))

    def add(self, line: str, where: str, inline: bool) -> None:
        """Raises ValueError; ``inline`` (a route's own setting, not a shared file):
        a line for another host is an error, not skipped."""
        blob = parse_revoked_line(line, self.host, self.port)
        if blob is None:
            if inline:
                raise ValueError(f"its hosts are not {known_hosts_name(self.host, self.port)}"
                                 " (the route's to:)")
            return
        self.paths.setdefault(blob, where)
        if inline:
            self.inline.add(blob)

    def check_trusted(self, problems: Problems) -> None:
        for key, trusted_at, trusted_inline in self.trusted.values():
            where = self.paths.get(key.blob)
            if where is None and self.krl is not None and self.krl.key_revoked(key.blob):
                where = self.krl_path
            if where is None:
                continue
            kind = "host CA" if key.authority else "host key"
            if trusted_inline and key.blob in self.inline:
                problems.error(where, f"revokes {key.fingerprint()}, which {trusted_at} "
                                      f"trusts as a {kind}: take one of the two lines out")
            else:
                problems.warn(where, f"revokes {key.fingerprint()}, which {trusted_at} "
                                     f"trusts as a {kind}: it is refused")


def _setting_lines(item: Mapping[str, Any], where: str, problems: Problems
                   ) -> list[tuple[int, str]]:
    """A setting of known_hosts-like lines (one string, a multi-line string or a list)
    as (index, line), without blank and comment lines."""
    key = where.rsplit(".", 1)[-1]
    raw = item.get(key)
    if raw is None:
        return []
    try:
        lines = [raw] if isinstance(raw, str) and "\n" not in raw \
            else (raw.splitlines() if isinstance(raw, str) else list(parse_list(raw)))
    except ValueError as exc:
        problems.error(where, str(exc))
        return []
    return [(index, str(line).strip()) for index, line in enumerate(lines)
            if str(line).strip() and not str(line).lstrip().startswith("#")]


def _host_cas(item: Mapping[str, Any], base: str, host: str, port: int,
              reader: Reader | None, problems: Problems, ledger: RevocationLedger
              ) -> list[HostKey]:
    """``ssh_upstream_host_ca`` (each line must be for this route's server) or
    ``ssh_upstream_host_ca_file`` (shared like known_hosts: lines for other hosts are
    skipped, but one must be for this server)."""
    found: list[HostKey] = []
    where = f"{base}.ssh_upstream_host_ca"
    for index, line in _setting_lines(item, where, problems):
        try:
            if line.startswith("@revoked"):
                ledger.add(line, f"{where}[{index}]", inline=True)
                continue
            authority = parse_host_ca_line(line, host, port)
        except ValueError as exc:
            problems.error(f"{where}[{index}]", str(exc))
            continue
        if authority is None:
            problems.error(f"{where}[{index}]", "its @cert-authority hosts are not "
                           f"{known_hosts_name(host, port)} (the route's to:)")
        else:
            found.append(authority)
            ledger.trust(authority, f"{where}[{index}]", inline=True)
    location = item.get("ssh_upstream_host_ca_file")
    if location is None:
        return found
    where = f"{base}.ssh_upstream_host_ca_file"
    if item.get("ssh_upstream_host_ca") is not None:
        problems.error(where, "set ssh_upstream_host_ca or ssh_upstream_host_ca_file, "
                              "not both")
        return found
    if reader is None or not isinstance(location, str) or not location:
        problems.error(where, "must be a file name")
        return found
    try:
        text = reader.read(location).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.error(where, f"cannot read {location}: {exc}")
        return found
    before = len(problems.errors)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            if line.lstrip().startswith("@revoked"):
                ledger.add(line.strip(), f"{where} ({location} line {number})", inline=False)
                continue
            authority = parse_host_ca_line(line, host, port)
        except ValueError as exc:
            problems.error(where, f"{location} line {number}: {exc}")
            continue
        if authority is not None:
            found.append(authority)
            ledger.trust(authority, f"{where} ({location} line {number})", inline=False)
    if not found and len(problems.errors) == before:
        problems.error(where, f"{location} has no CA for {known_hosts_name(host, port)} "
                              "(the route's to:)")
    return found


def _revoked_keys_file(item: Mapping[str, Any], base: str, reader: Reader | None,
                       problems: Problems, ledger: RevocationLedger) -> None:
    """``ssh_upstream_revoked_keys_file``: a KRL, or public keys one a line (as
    OpenSSH's ``RevokedHostKeys``); read with the config, so a reload rereads it."""
    location = item.get("ssh_upstream_revoked_keys_file")
    if location is None:
        return
    where = f"{base}.ssh_upstream_revoked_keys_file"
    if reader is None or not isinstance(location, str) or not location:
        problems.error(where, "must be a file name")
        return
    try:
        data = reader.read(location)
    except OSError as exc:
        problems.error(where, f"cannot read {location}: {exc}")
        return
    try:
        if is_krl(data):
            ledger.krl, ledger.krl_path = parse_krl(data), where
        else:
            for blob in parse_key_list(data.decode("utf-8")):
                ledger.paths.setdefault(blob, where)
    except (ValueError, UnicodeDecodeError) as exc:
        problems.error(where, f"{location}: {exc} (an OpenSSH KRL, or public keys one a "
                              "line, is expected)")


def reject_http_fields(item: Mapping[str, Any], base: str, problems: Problems) -> None:
    """An ssh:// route has no HTTP: fields that only mean something for HTTP are refused
    rather than silently ignored."""
    for key in ("redirect", "path", "prefix", "regex", "prefix_rewrite",
                "set_request_headers", "allow_websockets", "allow_spdy",
                "pass_identity_headers", "allow_public_unauthenticated_access",
                "cors_allow_preflight"):
        if item.get(key) not in (None, False, "", [], {}):
            problems.error(f"{base}.{key}", "does not apply to an ssh:// route")


def ssh_only_fields(item: Mapping[str, Any], base: str, problems: Problems) -> None:
    """SSH fields on a route that is not ``ssh://``."""
    for key in SSH_ROUTE_FIELDS:
        if item.get(key) is not None:
            problems.error(f"{base}.{key}", "only applies to an ssh:// route")


# -- global keys


@dataclass(frozen=True)
class SshMaterial:
    """The gateway's SSH host keys (PEM/OpenSSH private keys) and its user CA key."""

    host_keys: tuple[bytes, ...] = ()
    user_ca_key: bytes | None = None


def load_private_key(data: bytes) -> SigningKey:
    """An ed25519 or ECDSA private key, OpenSSH or PEM; ValueError otherwise."""
    key: Any
    try:
        if b"OPENSSH PRIVATE KEY" in data:
            key = serialization.load_ssh_private_key(data, password=None)
        else:
            key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted private key ({exc})") from None
    except Exception as exc:  # cryptography raises its own for unsupported formats
        raise ValueError(f"not a private key ({exc})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError(f"must be an ed25519 or ECDSA key, got {type(key).__name__}")
    return key


def load_ssh_material(ssh_address: str, host_keys: tuple[str, ...],
                      host_key_files: tuple[str, ...], user_ca_key: str,
                      user_ca_key_file: str, reader: Reader, problems: Problems,
                      ssh_routes: int) -> SshMaterial:
    """The keys ``ssh_address`` needs, each checked; problems at their key paths."""
    loaded: list[bytes] = []
    for index, text in enumerate(host_keys):
        data = text.encode() if "PRIVATE KEY" in text else _b64(text)
        _check(data, f"ssh_host_keys[{index}]", problems, loaded)
    for index, location in enumerate(host_key_files):
        try:
            data = reader.read(location)
        except OSError as exc:
            problems.error(f"ssh_host_key_files[{index}]", f"cannot read {location}: {exc}")
            continue
        _check(data, f"ssh_host_key_files[{index}]", problems, loaded)
    ca: list[bytes] = []
    if user_ca_key and user_ca_key_file:
        problems.error("ssh_user_ca_key", "set ssh_user_ca_key or ssh_user_ca_key_file, "
                                          "not both")
    elif user_ca_key:
        text = user_ca_key
        _check(text.encode() if "PRIVATE KEY" in text else _b64(text), "ssh_user_ca_key",
               problems, ca)
    elif user_ca_key_file:
        try:
            _check(reader.read(user_ca_key_file), "ssh_user_ca_key_file", problems, ca)
        except OSError as exc:
            problems.error("ssh_user_ca_key_file", f"cannot read {user_ca_key_file}: {exc}")
    if ssh_address:
        if not host_keys and not host_key_files:
            problems.error("ssh_host_key_files", "is required with ssh_address (the keys "
                           "the gateway's SSH server proves itself with; generate one with "
                           "ssh-keygen -t ed25519)")
        if not user_ca_key and not user_ca_key_file:
            problems.error("ssh_user_ca_key_file", "is required with ssh_address (the CA "
                           "that signs the gateway's certificates for servers; servers "
                           "trust it with TrustedUserCAKeys)")
    elif ssh_routes:
        problems.warn("ssh_address", f"is not set: the {ssh_routes} ssh:// route(s) are "
                                     "not served")
    return SshMaterial(tuple(loaded), ca[0] if ca else None)


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return b""


def _check(data: bytes, where: str, problems: Problems, into: list[bytes]) -> None:
    try:
        load_private_key(data)
    except ValueError as exc:
        problems.error(where, str(exc))
        return
    into.append(data)
