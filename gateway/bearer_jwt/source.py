"""Where a provider's verification keys come from, kept current: ``RemoteKeys`` (the
issuer's discovery document, ``/.well-known/openid-configuration`` -> ``jwks_uri``, or a
configured ``jwks_url``) and ``FileKeys`` (a ``jwks_file``, read again when it changes).

Both hold the last good ``KeySet``: an endpoint that is down, answers garbage or a set
with no usable key, or a file that is being rewritten, changes nothing; the next try
comes with backoff (1 s doubling to 5 min) and is logged. A good set is fetched again
every ``REFRESH`` (keys the issuer withdrew stop verifying), and at once when a token
names a key the set lacks, at most once per ``UNKNOWN_KID_INTERVAL`` (a stream of
tokens with invented ``kid`` values cannot make the gateway hammer the issuer).

Only the URLs the configuration names are fetched: the issuer's discovery document and
the ``jwks_uri`` it lists (``https`` only; the document must name the configured issuer),
or the configured ``jwks_url``. Nothing in a token leads anywhere. The I/O itself is a
``Fetch`` given by the caller (``gateway.services.bearer_keys.provider_fetch``: deadline,
body bound, the provider's TLS), so this module is the policy and is tested with a
clock and a table of answers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from gateway.bearer_jwt.keys import JwksError, KeySet, key_set

log = Logger(namespace="gateway.bearer")

Fetch = Callable[[str], Awaitable[bytes]]
"""GET one URL; the body of a 200 answer, any other outcome an exception (its text is
logged)."""

REFRESH = 15 * 60.0
UNKNOWN_KID_INTERVAL = 60.0
FIRST_RETRY = 1.0
MAX_RETRY = 300.0
FILE_POLL = 5.0
MAX_DISCOVERY_BYTES = 64 * 1024


class KeysUnusable(Exception):
    """What was fetched or read gives no usable key set; the text says why."""


def usable(provider: str, document: bytes, issuer: str = "") -> KeySet:
    """The key set of a JWKS document, which must hold at least one usable key (a set
    of nothing but skipped keys is garbage too: the last good one stays)."""
    try:
        keys = key_set(provider, document, issuer)
    except JwksError as exc:
        raise KeysUnusable(str(exc)) from None
    if not keys.keys:
        reasons = "; ".join(keys.skipped) or "it lists no keys"
        raise KeysUnusable(f"no usable key ({reasons})")
    return keys


def discovered(document: bytes, issuer: str | None) -> tuple[str, str]:
    """(issuer, jwks_uri) of a discovery document; ``issuer`` is what it must name
    (``None``: learn it, ``kubernetes:///``)."""
    if len(document) > MAX_DISCOVERY_BYTES:
        raise KeysUnusable("the discovery document is larger than 64 KiB")
    try:
        data = json.loads(document)
    except ValueError:
        raise KeysUnusable("the discovery document is not JSON") from None
    if not isinstance(data, dict):
        raise KeysUnusable("the discovery document is not a JSON object")
    named, uri = data.get("issuer"), data.get("jwks_uri")
    if not isinstance(named, str) or not named:
        raise KeysUnusable("the discovery document names no issuer")
    if issuer is not None and named != issuer:
        raise KeysUnusable("the discovery document names another issuer")
    if not isinstance(uri, str) or not uri.startswith("https://"):
        raise KeysUnusable("the discovery document has no https jwks_uri")
    return named, uri


class _Scheduled:
    """The refresh loop both sources share: one try at a time, the next one scheduled
    on ``clock`` after a success or with backoff after a failure."""

    provider: str

    def __init__(self, clock: IReactorTime, refresh: float, max_retry: float) -> None:
        self.clock = clock
        self.refresh = refresh
        self.max_retry = max_retry
        self.keys_set = False
        self.failures = 0
        self.last_try = float("-inf")
        self._call: IDelayedCall | None = None
        self._running: Deferred[None] | None = None
        self._stopped = True

    def start(self) -> Deferred[None]:
        """First try now; the Deferred fires when it ends (either way)."""
        self._stopped = False
        return self.try_now()

    def stop(self) -> None:
        self._stopped = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def try_now(self) -> Deferred[None]:
        """One try (or the running one)."""
        if self._running is not None:
            return self._running
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self.last_try = self.clock.seconds()
        running = ensureDeferred(self._attempt())
        if not running.called:  # (a fetch that answered at once has already ended)
            self._running = running
        return running

    def unknown_kid(self) -> None:
        if self._stopped or self._running is not None:
            return
        if self.clock.seconds() - self.last_try < UNKNOWN_KID_INTERVAL:
            return
        self.try_now()

    async def _attempt(self) -> None:
        try:
            await self.load()
        except Exception as exc:
            self.failures += 1
            delay = min(self.max_retry, FIRST_RETRY * 2 ** (self.failures - 1))
            log.warn("bearer provider {provider}: keys not updated: {reason}; "
                     "{kept}, next try in {delay:.0f} s", provider=self.provider,
                     reason=str(exc) or type(exc).__name__, delay=delay,
                     kept="keeping the last good keys" if self.keys_set else
                     "no keys yet: its tokens are refused")
        else:
            self.failures = 0
            delay = self.refresh
        finally:
            self._running = None
        if not self._stopped:
            self._call = self.clock.callLater(delay, self.try_now)

    async def load(self) -> None:
        raise NotImplementedError


class RemoteKeys(_Scheduled):
    """Keys over HTTPS: ``issuer``'s discovery document (``discovery_url``, by default
    ``<issuer>/.well-known/openid-configuration``) names the ``jwks_uri``, or
    ``jwks_url`` is given. ``learn_issuer``: take the issuer from the discovery
    document (``kubernetes:///``), carried in ``KeySet.issuer``."""

    def __init__(self, provider: str, issuer: str, fetch: Fetch, clock: IReactorTime, *,
                 jwks_url: str = "", discovery_url: str = "", learn_issuer: bool = False,
                 refresh: float = REFRESH) -> None:
        super().__init__(clock, refresh, MAX_RETRY)
        self.provider = provider
        self.issuer = issuer
        self.fetch = fetch
        self.jwks_url = jwks_url
        self.discovery_url = discovery_url or \
            f"{issuer.rstrip('/')}/.well-known/openid-configuration"
        self.learn_issuer = learn_issuer
        self.keys = KeySet(provider)
        self._document = b""
        self._jwks_uri = jwks_url
        self._learned = ""

    async def load(self) -> None:
        uri = self._jwks_uri
        if not uri:
            named, uri = discovered(await self.fetch(self.discovery_url),
                                    None if self.learn_issuer else self.issuer)
            self._learned = named if self.learn_issuer else ""
        try:
            document = await self.fetch(uri)
            if document == self._document and self.keys.issuer == self._learned:
                return  # the same keys: the verifier's cache stays
            keys = usable(self.provider, document, self._learned)
        except Exception:
            if not self.jwks_url:
                self._jwks_uri = ""  # it may have moved: ask discovery again next time
            raise
        self._jwks_uri = uri
        self._document = document
        self.keys = keys
        self.keys_set = True
        log.info("bearer provider {provider}: {count} keys from {url}{skipped}",
                 provider=self.provider, count=len(keys.keys), url=uri,
                 skipped="".join(f"; skipped {reason}" for reason in keys.skipped))


async def learned_issuer(fetch: Fetch, discovery_url: str) -> str:
    """The issuer a discovery document names (``kubernetes:///`` with a ``jwks_file``)."""
    named, _ = discovered(await fetch(discovery_url), None)
    return named


class FileKeys(_Scheduled):
    """Keys from a ``jwks_file``: read at start, and again whenever its size, time or
    inode changes (checked every ``poll`` seconds, and on an unknown ``kid``). A file
    that is missing or unusable is looked at again every ``poll`` seconds. ``learn``:
    the issuer, asked once before the first read (``kubernetes:///`` inside a cluster:
    the API server's discovery document)."""

    def __init__(self, provider: str, path: str, clock: IReactorTime, *,
                 issuer: str = "", poll: float = FILE_POLL,
                 learn: Callable[[], Awaitable[str]] | None = None) -> None:
        super().__init__(clock, poll, poll)  # a file costs a stat: no long backoff
        self.provider = provider
        self.path = path
        self.issuer = issuer
        self.learn = learn
        self.keys = KeySet(provider, issuer=issuer)
        self._seen: tuple[Any, ...] = ()

    async def load(self) -> None:
        if self.learn is not None and not self.issuer:
            self.issuer = await self.learn()
        self.read()

    def read(self) -> None:
        """Read the file if it changed (synchronous: a local file of a few KiB)."""
        try:
            status = os.stat(self.path)
        except OSError as exc:
            raise KeysUnusable(f"jwks_file {self.path}: {exc.strerror}") from None
        seen = (status.st_mtime_ns, status.st_size, status.st_ino)
        if seen == self._seen:
            return
        try:
            with open(self.path, "rb") as f:
                document = f.read(1024 * 1024)
        except OSError as exc:
            raise KeysUnusable(f"jwks_file {self.path}: {exc.strerror}") from None
        try:
            keys = usable(self.provider, document, self.issuer)
        except KeysUnusable as exc:
            raise KeysUnusable(f"jwks_file {self.path}: {exc}") from None
        self._seen = seen
        self.keys = keys
        self.keys_set = True
        log.info("bearer provider {provider}: {count} keys from {path}{skipped}",
                 provider=self.provider, count=len(keys.keys), path=self.path,
                 skipped="".join(f"; skipped {reason}" for reason in keys.skipped))

    def unknown_kid(self) -> None:
        # A file costs a stat: look at once, but not more than once a second.
        if not self._stopped and self.clock.seconds() - self.last_try >= 1.0:
            self.try_now()
