"""The token cache of ``gateway tcp``: where it lives, file modes, atomic replacement,
concurrent writers and readers, and forgetting only the token that was refused."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from unittest import mock

from twisted.trial.unittest import SynchronousTestCase

from gateway.cli.tcp.token_cache import TokenCache, cache_dir, cache_key


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _write_many(directory: str, token: str, rounds: int) -> None:
    cache = TokenCache(Path(directory), "https://gw:443", "db:5432")
    for _ in range(rounds):
        cache.store(token)


class LocationTests(SynchronousTestCase):
    def test_xdg_cache_home(self) -> None:
        self.assertEqual(cache_dir({"XDG_CACHE_HOME": "/x/cache", "HOME": "/home/a"}),
                         Path("/x/cache/gateway"))

    def test_home_when_unset_empty_or_relative(self) -> None:
        for value in (None, "", "relative/cache"):
            env = {"HOME": "/home/a"} if value is None else {"XDG_CACHE_HOME": value,
                                                              "HOME": "/home/a"}
            with self.subTest(value=value):
                self.assertEqual(cache_dir(env), Path("/home/a/.cache/gateway"))

    def test_one_file_per_gateway_and_destination(self) -> None:
        keys = {cache_key(g, d) for g in ("https://gw:443", "http://gw:443", "https://gw:8443")
                for d in ("db:5432", "db:5433")}
        self.assertEqual(len(keys), 6)
        self.assertTrue(all(k.startswith("tcp-") and k.endswith(".token") for k in keys))


class TokenCacheTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="tcp-cache-"))
        self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
        self.dir = self.root / "cache" / "gateway"
        self.cache = TokenCache(self.dir, "https://gw:443", "db:5432")

    def test_missing_is_none(self) -> None:
        self.assertIsNone(self.cache.load())

    def test_store_and_load_with_private_modes(self) -> None:
        self.cache.store("tok-1")
        self.assertEqual(self.cache.load(), "tok-1")
        self.assertEqual(mode(self.dir), 0o700)
        self.assertEqual(mode(self.cache.path), 0o600)
        self.assertEqual([p.name for p in self.dir.iterdir() if p.name.startswith(".tmp")], [])

    def test_existing_open_directory_is_tightened(self) -> None:
        self.dir.mkdir(parents=True)
        os.chmod(self.dir, 0o755)
        self.cache.store("tok")
        self.assertEqual(mode(self.dir), 0o700)

    def test_store_replaces_atomically(self) -> None:
        self.cache.store("old")
        with mock.patch("gateway.cli.tcp.token_cache.os.replace", wraps=os.replace) as spy:
            self.cache.store("new")
        (source, target), _ = spy.call_args
        self.assertEqual(Path(target), self.cache.path)
        self.assertEqual(Path(source).parent, self.dir)
        self.assertEqual(self.cache.load(), "new")

    def test_failed_write_leaves_the_old_token_and_no_temp_file(self) -> None:
        self.cache.store("old")
        with mock.patch("gateway.cli.tcp.token_cache.os.fsync", side_effect=OSError("full")), \
                self.assertRaises(OSError):
            self.cache.store("new")
        self.assertEqual(self.cache.load(), "old")
        self.assertEqual([p.name for p in self.dir.iterdir() if p.name.startswith(".tmp")], [])

    def test_forget_only_the_refused_token(self) -> None:
        self.cache.store("refused")
        self.assertTrue(self.cache.forget("refused"))
        self.assertFalse(self.cache.path.exists())
        self.cache.store("fresh-from-another-client")
        self.assertFalse(self.cache.forget("refused"))
        self.assertEqual(self.cache.load(), "fresh-from-another-client")
        self.assertFalse(TokenCache(self.root / "nowhere", "x", "y").forget("t"))

    def test_garbage_is_not_a_token(self) -> None:
        self.dir.mkdir(parents=True)
        for content in (b"", b"\n", b"two words\n", b"\x00\x01", b"a" * 20000):
            with self.subTest(content=content[:10]):
                self.cache.path.write_bytes(content)
                self.assertIsNone(self.cache.load())

    def test_concurrent_writers_and_readers_never_see_a_mix(self) -> None:
        tokens = [f"token-{i}-" + "x" * 2000 for i in range(4)]
        seen: set[str | None] = set()
        stop = threading.Event()

        def read() -> None:
            for _ in range(100_000):
                if stop.is_set():
                    return
                seen.add(self.cache.load())

        reader = threading.Thread(target=read)
        reader.start()
        writers = [threading.Thread(target=_write_many, args=(str(self.dir), t, 50))
                   for t in tokens]
        try:
            for w in writers:
                w.start()
            for w in writers:
                w.join(timeout=60)
        finally:
            stop.set()
            reader.join(timeout=60)
        self.assertLessEqual(seen - {None}, set(tokens))
        self.assertIn(self.cache.load(), tokens)
        self.assertEqual([p.name for p in self.dir.iterdir() if p.name.startswith(".tmp")], [])

    def test_concurrent_processes(self) -> None:
        context = multiprocessing.get_context("fork")
        tokens = [f"proc-{i}" for i in range(4)]
        procs = [context.Process(target=_write_many, args=(str(self.dir), t, 100))
                 for t in tokens]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        self.assertEqual([p.exitcode for p in procs], [0, 0, 0, 0])
        self.assertIn(self.cache.load(), tokens)
        self.assertEqual(mode(self.cache.path), 0o600)
