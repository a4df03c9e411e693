"""The key formats of OpenSSH's known_hosts, as the SSH fields of a route take them:
server keys (``TYPE BASE64`` or a known_hosts line), host CAs (``@cert-authority``),
``@revoked`` lines and revoked-key lists, with known_hosts' host patterns (globs,
negation, hashed names). Pure: text in, key blobs out, ValueError naming the line.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

# key types the gateway accepts for its own keys and pins for servers: no DSA, and no RSA
# (whose ssh-rsa signatures are SHA-1 unless both sides agree otherwise)
HOST_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                  "ecdsa-sha2-nistp521", "rsa-sha2-256", "rsa-sha2-512", "ssh-rsa")
# key types of host CAs (an RSA CA's certificates must be signed with SHA-2: host_cert)
CA_KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
                "ecdsa-sha2-nistp521", "ssh-rsa")

@dataclass(frozen=True, slots=True)
class HostKey:
    """One of a route's known_hosts entries: a server key (its type and wire blob), or
    with ``authority`` a CA whose host certificates the server may show instead
    (``@cert-authority``, ``ssh_upstream_host_ca``)."""

    type: str
    blob: bytes
    authority: bool = False

    def fingerprint(self) -> str:
        return fingerprint(self.blob)


def fingerprint(blob: bytes) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a key blob."""
    digest = hashlib.sha256(blob).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def parse_host_key_line(line: str) -> HostKey:
    """A known_hosts line (``host[,host] TYPE BASE64 [comment]``, markers refused) or
    ``TYPE BASE64``; raises ValueError naming what is wrong."""
    parts = line.split()
    if parts and parts[0].startswith("@"):
        raise ValueError(f"{parts[0]} lines are not supported; give the key itself")
    if len(parts) >= 2 and parts[0] in HOST_KEY_TYPES:
        kind, data = parts[0], parts[1]
    elif len(parts) >= 3 and parts[1] in HOST_KEY_TYPES:
        kind, data = parts[1], parts[2]
    else:
        raise ValueError(f"expected a known_hosts line or `TYPE BASE64`, got {line[:80]!r}")
    return HostKey(kind, _key_blob(kind, data))


def parse_revoked_line(line: str, host: str, port: int) -> bytes | None:
    """A known_hosts ``@revoked HOSTS TYPE BASE64 [comment]`` line: the key's blob, or
    None when HOSTS do not name ``host`` (on ``port``); ValueError naming what is
    wrong. Any key type: a revoked key is refused whatever it is."""
    parts = line.split()
    if len(parts) < 4 or parts[0] != "@revoked":
        raise ValueError(f"expected `@revoked HOSTS TYPE BASE64`, got {line[:80]!r}")
    patterns, kind, data = parts[1], parts[2], parts[3]
    if kind not in HOST_KEY_TYPES and kind not in CA_KEY_TYPES:
        raise ValueError(f"{kind[:40]!r} is not a key type the gateway knows (one of "
                         f"{', '.join(dict.fromkeys(HOST_KEY_TYPES + CA_KEY_TYPES))})")
    blob = _key_blob(kind, data)
    return blob if hosts_match(patterns, host, port) else None


def parse_host_ca_line(line: str, host: str, port: int) -> HostKey | None:
    """A host CA: ``TYPE BASE64 [comment]`` (its .pub file) or a known_hosts line
    ``@cert-authority HOSTS TYPE BASE64 [comment]``. None when the line's HOSTS do not
    name ``host`` (on ``port``, as known_hosts writes it: ``[host]:port`` unless 22);
    ValueError naming what is wrong otherwise."""
    parts = line.split()
    patterns = ""
    if parts and parts[0].startswith("@"):
        if parts[0] != "@cert-authority":
            raise ValueError(f"{parts[0]} lines are not supported; give the CA's public key "
                             "or an @cert-authority line")
        if len(parts) < 4:
            raise ValueError("expected `@cert-authority HOSTS TYPE BASE64`, got "
                             f"{line[:80]!r}")
        patterns, parts = parts[1], parts[2:]
    if len(parts) < 2 or parts[0] not in CA_KEY_TYPES:
        raise ValueError("expected the CA's public key `TYPE BASE64` (TYPE one of "
                         f"{', '.join(CA_KEY_TYPES)}) or an @cert-authority line, got "
                         f"{line[:80]!r}")
    kind = parts[0]
    blob = _key_blob(kind, parts[1])
    try:
        serialization.load_ssh_public_key(f"{kind} {parts[1]}".encode())
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"the {kind} key does not parse ({exc})") from None
    if patterns and not hosts_match(patterns, host, port):
        return None
    return HostKey(kind, blob, authority=True)


def hosts_match(patterns: str, host: str, port: int) -> bool:
    """OpenSSH's known_hosts host field: comma-separated patterns with ``*`` and ``?``,
    ``!`` negating (a negated match wins), or one hashed ``|1|SALT|HASH`` entry; the
    name is ``host``, or ``[host]:port`` for a port other than 22."""
    name = host.lower() if port == 22 else f"[{host.lower()}]:{port}"
    if patterns.startswith("|1|"):
        salt_hash = patterns[3:].split("|")
        if len(salt_hash) != 2:
            return False
        try:
            salt, digest = (base64.b64decode(v, validate=True) for v in salt_hash)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(
            hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)
    matched = False
    for pattern in patterns.lower().split(","):
        negated = pattern.startswith("!")
        if _glob(pattern[1:] if negated else pattern, name):
            if negated:
                return False
            matched = True
    return matched


def _glob(pattern: str, name: str) -> bool:
    """``*`` and ``?`` wildcards, in time proportional to the pattern's length times the
    name's (a regular expression of many ``*`` backtracks exponentially): on a mismatch
    after a ``*``, that ``*`` takes one more character and matching resumes."""
    p = n = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and pattern[p] in ("?", name[n]):
            p, n = p + 1, n + 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark, p = p, n, p + 1
        elif star >= 0:
            p, mark = star + 1, mark + 1
            n = mark
        else:
            return False
    return all(c == "*" for c in pattern[p:])


def _key_blob(kind: str, data: str) -> bytes:
    try:
        blob = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"the {kind} key is not valid base64") from None
    if _blob_type(blob) != kind:
        raise ValueError(f"the key data is not a {kind} key")
    return blob


def parse_key_list(text: str) -> set[bytes]:
    """A text file of public keys (``TYPE BASE64 [comment]``, the form OpenSSH's
    ``RevokedHostKeys`` takes besides a KRL): their blobs. ValueError naming the line."""
    out: set[bytes] = set()
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) < 2:
            raise ValueError(f"line {number}: expected `TYPE BASE64`")
        try:
            out.add(_key_blob(parts[0], parts[1]))
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return out


def _blob_type(blob: bytes) -> str:
    if len(blob) < 4:
        return ""
    size = int.from_bytes(blob[:4], "big")
    return blob[4:4 + size].decode("ascii", "replace") if size <= len(blob) - 4 else ""


def known_hosts_name(host: str, port: int) -> str:
    """How known_hosts names a server: ``host``, or ``[host]:port`` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"
