"""Keeps a certificate for every host the gateway serves: issues missing ones, renews
them a third of their lifetime (at most 30 days) before expiry, retries failures with
backoff, and tells the listener when its certificate set changed.

The blocking ACME client runs in the reactor's thread pool; everything else runs on
the reactor thread.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.autocert.challenge import PendingChallenges
from gateway.autocert.issue import PRODUCTION, STAGING, AcmeSettings, issue
from gateway.autocert.ocsp import Staple, fetch_staple
from gateway.autocert.storage import CertificateFiles, StoredCertificate
from gateway.config.snapshot import Snapshot

CHECK_INTERVAL = 60.0
FIRST_BACKOFF = 30.0
MAX_BACKOFF = 3600.0


def wanted_domains(snapshot: Snapshot) -> list[str]:
    """Every route host and the authenticate host that is a DNS name."""
    names: list[str] = []
    hosts = [r.host for r in snapshot.routes]
    if snapshot.options.authenticate_service_url:
        hosts.append(urlsplit(snapshot.options.authenticate_service_url).hostname or "")
    for host in hosts:
        try:
            ipaddress.ip_address(host)
            continue
        except ValueError:
            pass
        if host and "." in host and not host.startswith("*") and host not in names:
            names.append(host)
    return names


def acme_settings(snapshot: Snapshot, trusted_ca_file: str | None) -> AcmeSettings:
    o = snapshot.options
    directory = o.autocert_ca or (STAGING if o.autocert_use_staging else PRODUCTION)
    return AcmeSettings(directory, trusted_ca_file, o.autocert_must_staple)


class AutocertService(Service):
    log = Logger()

    def __init__(self, reactor: Any, snapshot: Snapshot, pending: PendingChallenges,
                 on_change: Callable[[], None], *,
                 issuer: Callable[..., tuple[bytes, bytes]] = issue,
                 stapler: Callable[[bytes], Staple | None] = fetch_staple,
                 run: Callable[..., Deferred[Any]] | None = None) -> None:
        """``issuer`` and ``run`` (how the blocking issuer is called; the thread pool by
        default) are replaceable for tests."""
        self.reactor = reactor
        self.issuer = issuer
        self.stapler = stapler
        self._no_ocsp: set[str] = set()
        self.run = run or (lambda f, *a: deferToThreadPool(reactor, reactor.getThreadPool(),
                                                            f, *a))
        self.pending = pending
        self.on_change = on_change
        self.snapshot = snapshot
        self.files = CertificateFiles(snapshot.options.autocert_dir)
        self.certificates: dict[str, StoredCertificate] = {}
        self._in_flight: set[str] = set()
        self._backoff: dict[str, tuple[float, float]] = {}  # domain -> (retry at, delay)
        self._retries: list[Any] = []
        self.staples: dict[str, Staple] = {}
        self._stapling: set[str] = set()
        self._loop = LoopingCall(self.check)
        self._loop.clock = reactor
        for domain in wanted_domains(snapshot):
            stored = self.files.load(domain)
            if stored is not None:
                self.certificates[domain] = stored

    def update(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        if self.running:
            self.check()

    def pairs(self) -> list[tuple[bytes, bytes, bytes | None]]:
        """(chain, key, stapled OCSP response or None) of every valid certificate."""
        now = datetime.datetime.now(datetime.UTC)
        out: list[tuple[bytes, bytes, bytes | None]] = []
        for domain, cert in self.certificates.items():
            if cert.not_after > now:
                staple = self.staples.get(domain)
                out.append((cert.chain_pem, cert.key_pem, staple.der if staple else None))
        return out

    def startService(self) -> None:
        Service.startService(self)
        self._loop.start(CHECK_INTERVAL, now=True).addErrback(
            lambda f: self.log.failure("autocert loop stopped", f))

    def _retry(self) -> None:
        self._retries = [r for r in self._retries if r.active()]
        if self.running:
            self.check()

    def stopService(self) -> None:
        if self._loop.running:
            self._loop.stop()
        for retry in self._retries:
            if retry.active():
                retry.cancel()
        self._retries = []
        Service.stopService(self)

    def check(self) -> None:
        now = self.reactor.seconds()
        utcnow = datetime.datetime.now(datetime.UTC)
        for domain in wanted_domains(self.snapshot):
            current = self.certificates.get(domain)
            if current is not None and utcnow < current.renew_at():
                self._maybe_staple(domain, current, utcnow)
                continue
            if domain in self._in_flight or self._backoff.get(domain, (0.0, 0.0))[0] > now:
                continue
            self._order(domain)

    def _trusted_ca_file(self) -> str | None:
        """The CA bundle for the ACME directory (``autocert_trusted_ca`` or ``_file``, as
        loaded with the configuration), as a file in ``autocert_dir``: the ACME client
        takes a path."""
        bundle = self.snapshot.material.autocert_trusted_ca
        return self.files.write_trusted_ca(bundle) if bundle else None

    def _maybe_staple(self, domain: str, cert: StoredCertificate,
                      utcnow: datetime.datetime) -> None:
        """Fetch (or refresh, halfway to nextUpdate) the OCSP response to staple."""
        staple = self.staples.get(domain)
        if domain in self._stapling or (staple is not None and utcnow < staple.refresh_at()):
            return
        if staple is None and domain in self._no_ocsp:
            return
        self._stapling.add(domain)
        d = self.run(self.stapler, cert.chain_pem)
        d.addCallbacks(self._stapled, self._staple_failed, callbackArgs=(domain, cert),
                       errbackArgs=(domain,))

    def _stapled(self, staple: Staple | None, domain: str, cert: StoredCertificate) -> None:
        self._stapling.discard(domain)
        if staple is None:
            self._no_ocsp.add(domain)  # the CA offers no OCSP for it
            return
        if self.certificates.get(domain) is cert:
            self.staples[domain] = staple
            self.on_change()

    def _staple_failed(self, failure: Failure, domain: str) -> None:
        self._stapling.discard(domain)
        self.log.warn("autocert: OCSP response for {domain} not fetched: {error}",
                      domain=domain, error=failure.getErrorMessage())

    def _order(self, domain: str) -> None:
        self._in_flight.add(domain)
        settings = acme_settings(self.snapshot, self._trusted_ca_file())
        self.log.info("autocert: requesting a certificate for {domain} from {directory}",
                      domain=domain, directory=settings.directory)
        d = self.run(self.issuer, settings, self.files, self.pending, domain)
        d.addCallbacks(self._issued, self._failed, callbackArgs=(domain,),
                       errbackArgs=(domain,))

    def _issued(self, result: tuple[bytes, bytes], domain: str) -> None:
        self._in_flight.discard(domain)
        self._backoff.pop(domain, None)
        chain_pem, key_pem = result
        stored = self.files.save(domain, chain_pem, key_pem)
        self.certificates[domain] = stored
        self.staples.pop(domain, None)
        self._no_ocsp.discard(domain)
        self._maybe_staple(domain, stored, datetime.datetime.now(datetime.UTC))
        self.log.info("autocert: certificate for {domain} issued, valid until {until}",
                      domain=domain, until=stored.not_after.isoformat())
        self.on_change()

    def _failed(self, failure: Failure, domain: str) -> None:
        self._in_flight.discard(domain)
        delay = min(self._backoff.get(domain, (0.0, FIRST_BACKOFF / 2))[1] * 2, MAX_BACKOFF)
        self._backoff[domain] = (self.reactor.seconds() + delay, delay)
        retry = self.reactor.callLater(delay, self._retry)
        self._retries.append(retry)
        self.log.error("autocert: order for {domain} failed, retrying in {delay:.0f}s: "
                       "{error}", domain=domain, delay=delay, error=failure.getErrorMessage())
