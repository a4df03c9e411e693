"""OpenSSH key revocation lists (KRLs, ``ssh-keygen -k``; the format is OpenSSH's
PROTOCOL.krl), read for a route's ``ssh_upstream_revoked_keys_file`` as OpenSSH's
``RevokedHostKeys`` reads them (its other form, a text file of public keys, is
``gateway.config.ssh.parse_key_list``).

A KRL revokes plain keys (explicitly, or by their SHA-1 or SHA-256 hash) and
certificates of one CA or of any CA (by serial: lists, ranges, bitmaps; or by key id).
A certificate is revoked when its key is, when its CA's key is, or when its CA's
section (or the any-CA one) names its serial or key id; serial 0 (a CA that set none)
is never revoked by serial. Parsing follows OpenSSH's ``ssh_krl_from_blob``: what it
refuses is refused here (a critical extension, trailing data in a section, a serial
range that is empty or starts at 0, a bitmap over 2048 bytes), and
``tests/unit/test_ssh_krl.py`` holds the two to the same answers with KRLs
``ssh-keygen`` wrote. Plain functions, no I/O; sizes
are bounded by the caller's file limit, the bitmap's and the count of serial ranges.
"""

from __future__ import annotations

import bisect
import hashlib
import struct
from dataclasses import dataclass, field

MAGIC = b"SSHKRL\n\0"
FORMAT_VERSION = 1
SECTION_CERTIFICATES = 1
SECTION_EXPLICIT_KEY = 2
SECTION_FINGERPRINT_SHA1 = 3
SECTION_SIGNATURE = 4
SECTION_FINGERPRINT_SHA256 = 5
SECTION_EXTENSION = 255
CERT_SERIAL_LIST = 0x20
CERT_SERIAL_RANGE = 0x21
CERT_SERIAL_BITMAP = 0x22
CERT_KEY_ID = 0x23
CERT_EXTENSION = 0x39
MAX_BIGNUM_BYTES = 16384 // 8  # OpenSSH's SSHBUF_MAX_BIGNUM: the bitmap's bound
MAX_RANGES = 1 << 20  # serial ranges kept per CA (a file of many bitmaps is many)
U64 = (1 << 64) - 1


class KrlError(ValueError):
    """Why the bytes are not a KRL OpenSSH would load."""


@dataclass
class _Serials:
    """Revoked serials of one CA (or any CA) as sorted disjoint ranges, and key ids,
    while the KRL is read."""

    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    key_ids: set[str] = field(default_factory=set)

    def add_range(self, low: int, high: int) -> None:
        if low > high or low == 0:
            raise KrlError(f"serial range {low}-{high} is empty or starts at 0")
        at = bisect.bisect_left(self.ends, low - 1)  # first range that may touch it
        stop = at
        while stop < len(self.starts) and self.starts[stop] <= high + 1:
            low, high = min(low, self.starts[stop]), max(high, self.ends[stop])
            stop += 1
        self.starts[at:stop] = [low]
        self.ends[at:stop] = [high]
        if len(self.starts) > MAX_RANGES:
            raise KrlError(f"more than {MAX_RANGES} serial ranges for one CA")

    def frozen(self) -> CertificateRevocations:
        return CertificateRevocations(tuple(self.starts), tuple(self.ends),
                                      frozenset(self.key_ids))


@dataclass(frozen=True)
class CertificateRevocations:
    """One CA's (or any CA's) revoked serials (sorted disjoint ranges) and key ids."""

    starts: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    key_ids: frozenset[str] = frozenset()

    def revoked(self, serial: int, key_id: str) -> bool:
        if key_id in self.key_ids:
            return True
        if serial == 0:  # a CA that set none: never revoked by serial
            return False
        at = bisect.bisect_right(self.starts, serial) - 1
        return at >= 0 and serial <= self.ends[at]


@dataclass(frozen=True)
class Krl:
    version: int = 0
    generated: int = 0
    comment: str = ""
    keys: frozenset[bytes] = frozenset()  # plain key blobs
    sha1: frozenset[bytes] = frozenset()
    sha256: frozenset[bytes] = frozenset()
    # (CA key blob, b"" for any CA; what is revoked of its certificates)
    certificates: tuple[tuple[bytes, CertificateRevocations], ...] = ()

    def key_revoked(self, blob: bytes) -> bool:
        """A plain key (a certificate's key or CA included) by blob or hash."""
        return (blob in self.keys or hashlib.sha256(blob).digest() in self.sha256
                or hashlib.sha1(blob).digest() in self.sha1)

    def certificate_revoked(self, ca_blob: bytes, serial: int, key_id: str) -> bool:
        """By the certificate's serial or key id, in its CA's section or the any-CA one
        (its key and CA are asked of ``key_revoked``)."""
        return any(ca in (ca_blob, b"") and section.revoked(serial, key_id)
                   for ca, section in self.certificates)


class _Reader:
    def __init__(self, data: bytes, what: str) -> None:
        self.data, self.at, self.what = data, 0, what

    def left(self) -> int:
        return len(self.data) - self.at

    def take(self, size: int) -> bytes:
        if size > self.left():
            raise KrlError(f"{self.what} ends early")
        out = self.data[self.at:self.at + size]
        self.at += size
        return out

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        value: int = struct.unpack(">I", self.take(4))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack(">Q", self.take(8))[0]
        return value

    def string(self) -> bytes:
        return self.take(self.u32())

    def cstring(self) -> str:
        raw = self.string()
        if b"\0" in raw[:-1]:  # (one at the very end is allowed, and dropped)
            raise KrlError(f"{self.what} holds a string with a NUL byte")
        return raw.rstrip(b"\0").decode("utf-8", "replace")


def is_krl(data: bytes) -> bool:
    return data.startswith(MAGIC)


def parse_krl(data: bytes) -> Krl:
    """A KRL's revocations; KrlError naming what OpenSSH would refuse."""
    if not is_krl(data):
        raise KrlError("not a KRL (no SSHKRL header)")
    read = _Reader(data, "the KRL")
    read.take(len(MAGIC))
    if (version := read.u32()) != FORMAT_VERSION:
        raise KrlError(f"KRL format version {version} (this gateway reads {FORMAT_VERSION})")
    version, generated = read.u64(), read.u64()
    read.u64()  # flags: none defined
    read.string()  # reserved
    comment = read.cstring()
    keys: set[bytes] = set()
    sha1: set[bytes] = set()
    sha256: set[bytes] = set()
    serials: dict[bytes, _Serials] = {}
    while read.left():
        kind = read.u8()
        if kind == SECTION_SIGNATURE:
            # (its body is two strings; OpenSSH loads past it without checking it)
            read.string()
            read.string()
            continue
        section = _Reader(read.string(), f"KRL section {kind}")
        if kind == SECTION_CERTIFICATES:
            _certificates(section, serials)
        elif kind == SECTION_EXPLICIT_KEY:
            _blobs(section, keys, 0)
        elif kind == SECTION_FINGERPRINT_SHA1:
            _blobs(section, sha1, 20)
        elif kind == SECTION_FINGERPRINT_SHA256:
            _blobs(section, sha256, 32)
        elif kind == SECTION_EXTENSION:
            _extension(section)
        else:
            raise KrlError(f"unknown KRL section type {kind}")
        if section.left():
            raise KrlError(f"KRL section {kind} holds data after its end")
    return Krl(version, generated, comment, frozenset(keys), frozenset(sha1),
               frozenset(sha256), tuple((ca, s.frozen()) for ca, s in serials.items()))


def _blobs(section: _Reader, into: set[bytes], size: int) -> None:
    while section.left():
        blob = section.string()
        if size and len(blob) != size:
            raise KrlError(f"a key hash of {len(blob)} bytes (expected {size})")
        if not size:
            _check_key_blob(blob)
        into.add(blob)


def _extension(section: _Reader) -> None:
    name = section.cstring()
    critical = section.u8()
    section.string()
    if section.left():
        raise KrlError(f"the extension {name[:60]!r} holds data after its end")
    if critical:
        raise KrlError(f"the KRL needs the extension {name[:60]!r}, unknown here")


def _certificates(section: _Reader, serials: dict[bytes, _Serials]) -> None:
    ca = section.string()
    section.string()  # reserved
    if ca:
        _check_key_blob(ca)
    revoked = serials.setdefault(ca, _Serials())
    while section.left():
        kind = section.u8()
        sub = _Reader(section.string(), f"KRL certificate section {kind:#x}")
        if kind == CERT_SERIAL_LIST:
            while sub.left():
                serial = sub.u64()
                revoked.add_range(serial, serial)
        elif kind == CERT_SERIAL_RANGE:
            low, high = sub.u64(), sub.u64()
            revoked.add_range(low, high)
        elif kind == CERT_SERIAL_BITMAP:
            _bitmap(sub.u64(), sub.string(), revoked)
        elif kind == CERT_KEY_ID:
            while sub.left():
                revoked.key_ids.add(sub.cstring())
        elif kind == CERT_EXTENSION:
            _extension(sub)
        else:
            raise KrlError(f"unknown KRL certificate section type {kind:#x}")
        if sub.left():
            raise KrlError(f"KRL certificate section {kind:#x} holds data after its end")


def _bitmap(offset: int, mpint: bytes, revoked: _Serials) -> None:
    """Bit N (from the least significant) revokes serial ``offset + N``; each run of
    set bits becomes one range."""
    if mpint and mpint[0] & 0x80:
        raise KrlError("a serial bitmap that is a negative number")
    if len(mpint) > MAX_BIGNUM_BYTES + 1 or (len(mpint) == MAX_BIGNUM_BYTES + 1 and mpint[0]):
        raise KrlError(f"a serial bitmap of {len(mpint)} bytes (at most {MAX_BIGNUM_BYTES})")
    bits = int.from_bytes(mpint, "big")
    if bits and offset + bits.bit_length() - 1 > U64:
        raise KrlError("a serial bitmap past the largest serial")
    position = 0
    while bits:
        skip = (bits & -bits).bit_length() - 1  # trailing zeros
        bits >>= skip
        position += skip
        run = (~bits & (bits + 1)).bit_length() - 1  # trailing ones
        low = offset + position
        revoked.add_range(low, low + run - 1)  # (within 2**64: checked above)
        bits >>= run
        position += run


def _check_key_blob(blob: bytes) -> None:
    """A key in the wire form: a type name, then its fields (not read further: only
    the blob's bytes are compared, as OpenSSH compares the keys they encode)."""
    read = _Reader(blob, "a key in the KRL")
    name = read.string()
    if not name or not name.isascii() or b"-cert-v01@" in name:
        raise KrlError("a KRL key that is not a plain public key")
