"""Every directory the gateway creates is 0700 at every level, whatever the umask, and a
directory that already existed keeps its mode (``gateway.private_dirs``), through each
of its users: recordings, the audit file, autocert's store, ``gateway tcp``'s cache.

Regression (issue 39): ``ssh_recording_dir`` was made with ``os.makedirs(mode=0o700)``,
which gives that mode to the innermost directory only: the recording directory itself
came out 0755 under the usual umask 022."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import trustme
from twisted.trial.unittest import SynchronousTestCase

from gateway.autocert.storage import CertificateFiles
from gateway.cli.tcp.token_cache import TokenCache
from gateway.observability.audit import AuditFile
from gateway.private_dirs import make_private_dirs
from gateway.ssh.recorder import OsDisk


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


class MakePrivateDirsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="private-dirs-"))
        self.addCleanup(shutil.rmtree, self.base)
        os.chmod(self.base, 0o755)  # the operator's: must stay as it is

    def test_every_level_made_is_0700_and_the_existing_parent_is_untouched(self) -> None:
        target = self.base / "a" / "b" / "c"
        with umask(0o022):
            made = make_private_dirs(target)
        levels = [self.base / "a", self.base / "a" / "b", target]
        self.assertEqual(made, tuple(str(p) for p in levels))
        self.assertEqual([mode(p) for p in levels], [0o700] * 3)
        self.assertEqual(mode(self.base), 0o755)

    def test_an_umask_that_masks_the_owner_changes_nothing(self) -> None:
        with umask(0o277):  # os.mkdir(path, 0o700) alone would make it 0500
            make_private_dirs(self.base / "x" / "y")
        self.assertEqual(mode(self.base / "x"), 0o700)
        self.assertEqual(mode(self.base / "x" / "y"), 0o700)

    def test_existing_levels_keep_their_mode(self) -> None:
        shared = self.base / "shared"
        shared.mkdir()
        os.chmod(shared, 0o751)
        with umask(0o022):
            made = make_private_dirs(shared / "mine")
            again = make_private_dirs(shared / "mine")
        self.assertEqual(made, (str(shared / "mine"),))
        self.assertEqual(again, ())
        self.assertEqual(mode(shared), 0o751)
        self.assertEqual(mode(shared / "mine"), 0o700)

    def test_relative_path(self) -> None:
        cwd = os.getcwd()
        self.addCleanup(os.chdir, cwd)
        os.chdir(self.base)
        with umask(0o022):
            make_private_dirs(os.path.join("r1", "r2"))
        self.assertEqual((mode(self.base / "r1"), mode(self.base / "r1" / "r2")),
                         (0o700, 0o700))

    def test_a_file_in_the_way_raises(self) -> None:
        (self.base / "file").write_text("x")
        with self.assertRaises(OSError):
            make_private_dirs(self.base / "file" / "below")
        with self.assertRaises(FileExistsError):
            make_private_dirs(self.base / "file")


class UsersTests(SynchronousTestCase):
    """Each place the gateway creates directories, with a parent the operator made 0755
    and two levels missing under it, under umask 022."""

    def setUp(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="private-dirs-users-"))
        self.addCleanup(shutil.rmtree, self.base)
        os.chmod(self.base, 0o755)
        self.addCleanup(os.umask, os.umask(0o022))

    def assertPrivateBelowBase(self, deepest: Path) -> None:
        levels = []
        level = deepest
        while level != self.base:
            levels.append(level)
            level = level.parent
        self.assertGreaterEqual(len(levels), 2)
        self.assertEqual({str(p): mode(p) for p in levels},
                         {str(p): 0o700 for p in levels})
        self.assertEqual(mode(self.base), 0o755)

    def test_recordings(self) -> None:
        """``ssh_recording_dir`` (missing) and the day's directory under it."""
        path = self.base / "var" / "recordings" / "2026-12-06" / "c-1.cast"
        fd = OsDisk().create(str(path))
        os.close(fd)
        self.assertEqual(mode(path), 0o600)
        self.assertPrivateBelowBase(path.parent)

    def test_audit_file(self) -> None:
        path = self.base / "log" / "gateway" / "audit.jsonl"
        file = AuditFile(str(path))
        file.close()
        self.assertEqual(mode(path), 0o600)
        self.assertPrivateBelowBase(path.parent)

    def test_autocert_store(self) -> None:
        files = CertificateFiles(str(self.base / "state" / "autocert"))
        leaf = trustme.CA().issue_cert("app.example.com")
        files.save("app.example.com", leaf.cert_chain_pems[0].bytes(),
                   leaf.private_key_pem.bytes())
        self.assertPrivateBelowBase(files.root / "certs")

    def test_token_cache(self) -> None:
        cache = TokenCache(self.base / "cache" / "gateway", "https://gw.example", "db:5432")
        cache.store("token")
        self.assertPrivateBelowBase(self.base / "cache" / "gateway")

