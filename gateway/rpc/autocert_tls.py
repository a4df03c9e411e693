"""gRPC TLS from autocert's certificates.

A databroker or authorize process with ``autocert: true`` and no certificate of its own
serves gRPC with the certificates the proxies obtain through ACME and keep in
``autocert_dir`` (shared between the processes, as the README asks for autocert): one
per route host and the authenticate host, the client's SNI (the service URL's host, or
``override_certificate_name``) choosing among them. This process never orders any: it
serves no HTTPS listener to answer the ACME challenges on.

Renewals reach new connections without a restart: grpc asks ``fetch`` at each
handshake, and the files are read again at most every ``RELOAD_SECONDS``.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from typing import Any

import grpc

from gateway.autocert.storage import CertificateFiles

RELOAD_SECONDS = 10.0

# (key, chain) as grpc takes them
Pairs = tuple[tuple[bytes, bytes], ...]


class NoAutocertCertificate(Exception):
    """``autocert_dir`` holds no valid certificate for any of the wanted hosts yet."""


class AutocertCertificates:
    def __init__(self, directory: str, domains: list[str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.directory = directory
        self.domains = list(domains)
        self.files = CertificateFiles(directory)
        self.clock = clock
        self._pairs: Pairs = ()
        self._read_at = float("-inf")

    def read(self) -> Pairs:
        """Every certificate in ``autocert_dir`` for the wanted hosts, not expired."""
        now = datetime.datetime.now(datetime.UTC)
        pairs = []
        for domain in self.domains:
            stored = self.files.load(domain)
            if stored is not None and stored.not_after > now:
                pairs.append((stored.key_pem, stored.chain_pem))
        return tuple(pairs)

    def credentials(self) -> Any:
        """Server credentials that follow renewals; ``NoAutocertCertificate`` when there
        is nothing to serve yet."""
        self._pairs, self._read_at = self.read(), self.clock()
        if not self._pairs:
            raise NoAutocertCertificate(
                f"autocert: autocert_dir {self.directory} holds no certificate yet for "
                f"{', '.join(self.domains) or 'any host'}; the proxies obtain them "
                f"(share autocert_dir with them and start one first), or set "
                f"certificate_file and certificate_key_file for gRPC")
        return grpc.dynamic_ssl_server_credentials(
            grpc.ssl_server_certificate_configuration(list(self._pairs)), self.fetch)

    def fetch(self) -> Any:
        """A new configuration when the files changed since the last read (renewed,
        or a host's certificate added); None to keep the current one."""
        now = self.clock()
        if now - self._read_at < RELOAD_SECONDS:
            return None
        self._read_at = now
        pairs = self.read()
        if not pairs or pairs == self._pairs:
            return None  # all expired or unreadable: keep serving what there was
        self._pairs = pairs
        return grpc.ssl_server_certificate_configuration(list(pairs))
