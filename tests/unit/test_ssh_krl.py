"""OpenSSH KRLs (``gateway.config.ssh_krl``) against OpenSSH itself: KRLs that
``ssh-keygen -k`` writes from random specifications (serial lists, ranges and sets
dense enough to become bitmaps, key ids, a CA's and any CA's sections, keys by blob,
SHA-1 and SHA-256), each certificate and key asked of both, ``ssh-keygen -Q`` and the
parser, and the answers compared; then what OpenSSH refuses to load."""

from __future__ import annotations

import base64
import random
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives.serialization import ssh
from twisted.trial.unittest import SynchronousTestCase

from gateway.config.ssh import parse_key_list
from gateway.config.ssh_krl import MAGIC, Krl, KrlError, is_krl, parse_krl

KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
SEEDS = range(6)


def run(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([KEYGEN, *args], capture_output=True, timeout=30)


def keygen(path: Path, kind: str = "ed25519") -> Path:
    done = run("-q", "-t", kind, "-N", "", "-C", path.name, "-f", str(path))
    assert done.returncode == 0, done.stderr
    return path


def blob(pub: Path) -> bytes:
    return base64.b64decode(pub.read_text().split()[1])


def gateway_says(krl: Krl, pub: Path) -> bool:
    """What the gateway's client decides for the key or certificate in ``pub``."""
    line = pub.read_text().split()
    if "-cert-v01@" not in line[0]:
        return krl.key_revoked(blob(pub))
    cert = ssh.load_ssh_public_identity(" ".join(line[:2]).encode())
    assert isinstance(cert, ssh.SSHCertificate)

    def raw(key: object) -> bytes:
        encoded = key.public_bytes(  # type: ignore[attr-defined]
            ssh.Encoding.OpenSSH, ssh.PublicFormat.OpenSSH)
        return base64.b64decode(encoded.split()[1])
    ca, key = raw(cert.signature_key()), raw(cert.public_key())
    return (krl.key_revoked(key) or krl.key_revoked(ca)
            or krl.certificate_revoked(ca, cert.serial, cert.key_id.decode()))


def openssh_says(krl_path: Path, pub: Path) -> bool:
    done = run("-Q", "-f", str(krl_path), str(pub))
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 1


class DifferentialTests(SynchronousTestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = Path(tempfile.mkdtemp(prefix="krl-"))
        d = cls.dir
        cls.cas = [keygen(d / "ca1"), keygen(d / "ca2", "ecdsa"), keygen(d / "ca3", "rsa")]
        cls.hosts = [keygen(d / f"host{i}", kind) for i, kind in
                     enumerate(["ed25519", "ecdsa", "rsa", "ed25519", "ed25519", "ecdsa"])]
        cls.certs: list[Path] = []
        rng = random.Random(7)
        serials = [0, 1, 2, 3, 7, 8, 63, 64, 65, 100, 127, 128, 129, 1000, 1001,
                   2**32, 2**63, 2**64 - 1]
        for number, serial in enumerate(serials * 2):
            ca = cls.cas[number % len(cls.cas)]
            host = cls.hosts[number % len(cls.hosts)]
            name = d / f"cert{number}"
            shutil.copy(f"{host}.pub", f"{name}.pub")
            done = run("-q", "-h", "-s", str(ca), "-I", f"host-{rng.randrange(6)}",
                       "-z", str(serial), "-n", "db", f"{name}.pub")
            assert done.returncode == 0, done.stderr
            cls.certs.append(Path(f"{name}-cert.pub"))

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.dir, ignore_errors=True)

    def spec(self, rng: random.Random) -> list[str]:
        lines = []
        for _ in range(rng.randrange(1, 6)):
            low = rng.choice([1, 2, 7, 60, 100, 990, 2**32 - 3, 2**62, 2**63])
            lines.append(f"serial: {low}-{low + rng.randrange(0, 40)}" if rng.random() < 0.5
                         else f"serial: {low}")
        base = rng.choice([1, 60, 120, 900])
        lines += [f"serial: {base + n}" for n in range(70) if rng.random() < 0.6]  # bitmaps
        lines += [f"id: host-{rng.randrange(6)}" for _ in range(rng.randrange(0, 2))]
        return lines

    def krl_for(self, seed: int) -> Path:
        """A KRL with a section for one CA, a second CA, any CA (``-s none``), and keys
        by blob, SHA-1 and SHA-256 (``-u``: each merged into the one file)."""
        rng = random.Random(seed)
        d = self.dir / f"krl{seed}"
        d.mkdir()
        krl = d / "krl"
        first = rng.sample(self.cas, 2)
        for step, ca in enumerate([*first, None]):
            spec = d / f"spec{step}"
            lines = self.spec(rng) if ca is not None else \
                [f"id: host-{rng.randrange(6)}"]
            if step == 0:
                for host in rng.sample(self.hosts, 2):
                    kind = rng.choice(["key", "sha1", "sha256"])
                    lines.append(f"{kind}: {Path(f'{host}.pub').read_text().strip()}")
            if step == 1 and rng.random() < 0.5:  # a revoked CA key
                lines.append(f"key: {Path(f'{rng.choice(self.cas)}.pub').read_text().strip()}")
            spec.write_text("\n".join(lines) + "\n")
            args = ["-k", *(["-u"] if step else []), "-f", str(krl),
                    "-s", f"{ca}.pub" if ca is not None else "none", str(spec)]
            done = run(*args)
            assert done.returncode == 0, (args, done.stderr)
        return krl

    def test_the_same_answer_as_openssh(self) -> None:
        asked = revoked = 0
        for seed in SEEDS:
            path = self.krl_for(seed)
            krl = parse_krl(path.read_bytes())
            for pub in [*self.certs, *(Path(f"{h}.pub") for h in self.hosts),
                        *(Path(f"{c}.pub") for c in self.cas)]:
                expected = openssh_says(path, pub)
                self.assertEqual(gateway_says(krl, pub), expected, (seed, pub.name))
                asked += 1
                revoked += expected
        # both answers were met often (the comparison means something)
        self.assertGreater(revoked, asked // 10)
        self.assertLess(revoked, asked - asked // 10)

    def test_bitmaps_are_met(self) -> None:
        """The random specifications are dense enough for ssh-keygen to write bitmap
        sections (0x22), not only lists and ranges."""
        data = self.krl_for(100).read_bytes()
        self.assertIn(b"\x22", data)
        self.assertTrue(parse_krl(data).certificates)


def header(comment: bytes = b"") -> bytes:
    return (MAGIC + struct.pack(">IQQQ", 1, 3, 1_800_000_000, 0) + struct.pack(">I", 0)
            + struct.pack(">I", len(comment)) + comment)


def string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def certificates(*subsections: bytes, ca: bytes = b"") -> bytes:
    return bytes([1]) + string(string(ca) + string(b"") + b"".join(subsections))


class ParserTests(SynchronousTestCase):
    def test_header(self) -> None:
        krl = parse_krl(header(b"fleet"))
        self.assertEqual((krl.version, krl.generated, krl.comment), (3, 1_800_000_000, "fleet"))
        self.assertTrue(is_krl(header()))
        self.assertFalse(is_krl(b"ssh-ed25519 AAAA"))

    def test_serials(self) -> None:
        krl = parse_krl(header() + certificates(
            bytes([0x20]) + string(struct.pack(">QQ", 5, 9)),
            bytes([0x21]) + string(struct.pack(">QQ", 100, 200)),
            # bits 0, 2, 3 from serial 1000
            bytes([0x22]) + string(struct.pack(">Q", 1000) + string(b"\x0d"))))
        revoked = [n for n in range(0, 1010) if krl.certificate_revoked(b"x", n, "")]
        self.assertEqual(revoked, [5, 9, *range(100, 201), 1000, 1002, 1003])
        self.assertFalse(krl.certificate_revoked(b"x", 0, ""))

    def test_what_openssh_refuses(self) -> None:
        cases = {
            b"nope": "no SSHKRL header",
            MAGIC + struct.pack(">I", 2): "format version 2",
            header()[:-2]: "ends early",
            header() + bytes([9]) + string(b""): "unknown KRL section type 9",
            header() + certificates(bytes([0x21]) + string(struct.pack(">QQ", 0, 5))):
                "empty or starts at 0",
            header() + certificates(bytes([0x21]) + string(struct.pack(">QQ", 9, 5))):
                "empty or starts at 0",
            header() + certificates(bytes([0x20]) + string(struct.pack(">Q", 0))):
                "empty or starts at 0",
            header() + certificates(bytes([0x20]) + string(b"\x01" * 9)): "ends early",
            header() + certificates(bytes([0x22]) + string(
                struct.pack(">Q", 2**64 - 2) + string(b"\x07"))): "past the largest serial",
            header() + certificates(bytes([0x22]) + string(
                struct.pack(">Q", 1) + string(b"\x80"))): "negative",
            header() + certificates(bytes([0x22]) + string(
                struct.pack(">Q", 1) + string(b"\x01" * 2049))): "a serial bitmap of 2049",
            header() + bytes([255]) + string(string(b"x@example") + b"\x01" + string(b"")):
                "needs the extension 'x@example'",
            header() + bytes([3]) + string(string(b"short")): "a key hash of 5 bytes",
            header() + bytes([2]) + string(string(string(b"ssh-ed25519-cert-v01@openssh.com"))):
                "not a plain public key",
            header() + bytes([2]) + string(string(b"")) + b"": "ends early",
        }
        for data, reason in cases.items():
            with self.assertRaises(KrlError, msg=reason) as caught:
                parse_krl(data)
            self.assertIn(reason, str(caught.exception))

    def test_optional_extensions_and_signatures_are_passed(self) -> None:
        parse_krl(header() + bytes([255]) + string(string(b"x@example") + b"\x00"
                                                   + string(b"data"))
                  + bytes([4]) + string(b"key") + string(b"signature"))

    def test_key_lists(self) -> None:
        key = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
        self.assertEqual(parse_key_list(f"# stolen\n\nssh-ed25519 {key} db1\n"),
                         {base64.b64decode(key)})
        for text, reason in ((f"ssh-rsa {key}", "line 1: the key data is not a ssh-rsa"),
                             ("\nssh-ed25519", "line 2: expected"),
                             ("ssh-ed25519 !!", "not valid base64")):
            with self.assertRaises(ValueError) as caught:
                parse_key_list(text)
            self.assertIn(reason, str(caught.exception))
