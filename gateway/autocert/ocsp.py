"""OCSP stapling for autocert certificates: fetch the CA's OCSP response (blocking;
run off the reactor thread) and know when to fetch the next one."""

from __future__ import annotations

import datetime
import urllib.request
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509 import ocsp
from cryptography.x509.oid import AuthorityInformationAccessOID

TIMEOUT = 10.0
MAX_RESPONSE = 64 * 1024


@dataclass(frozen=True)
class Staple:
    der: bytes
    this_update: datetime.datetime
    next_update: datetime.datetime | None

    def refresh_at(self) -> datetime.datetime:
        """Halfway to nextUpdate (or a day after thisUpdate when the CA gives none)."""
        if self.next_update is None:
            return self.this_update + datetime.timedelta(days=1)
        return self.this_update + (self.next_update - self.this_update) / 2


def ocsp_url(certificate: x509.Certificate) -> str | None:
    try:
        aia = certificate.extensions.get_extension_for_class(
            x509.AuthorityInformationAccess).value
    except x509.ExtensionNotFound:
        return None
    for description in aia:
        if description.access_method == AuthorityInformationAccessOID.OCSP:
            url = str(description.access_location.value)
            if url.startswith(("http://", "https://")):
                return url
    return None


def fetch_staple(chain_pem: bytes) -> Staple | None:
    """The OCSP response for the chain's leaf, or None when the CA offers no OCSP."""
    chain = x509.load_pem_x509_certificates(chain_pem)
    if len(chain) < 2:
        return None
    leaf, issuer = chain[0], chain[1]
    url = ocsp_url(leaf)
    if url is None:
        return None
    request = ocsp.OCSPRequestBuilder().add_certificate(leaf, issuer, hashes.SHA1()).build()
    body = request.public_bytes(serialization.Encoding.DER)
    http = urllib.request.Request(url, data=body, method="POST",
                                  headers={"Content-Type": "application/ocsp-request"})
    with urllib.request.urlopen(http, timeout=TIMEOUT) as reply:
        der = reply.read(MAX_RESPONSE + 1)
    if len(der) > MAX_RESPONSE:
        raise ValueError(f"OCSP response from {url} is larger than {MAX_RESPONSE} bytes")
    response = ocsp.load_der_ocsp_response(der)
    if response.response_status != ocsp.OCSPResponseStatus.SUCCESSFUL:
        raise ValueError(f"OCSP responder {url} answered {response.response_status.name}")
    if response.serial_number != leaf.serial_number:
        raise ValueError(f"OCSP responder {url} answered for another certificate")
    return Staple(der, response.this_update_utc, response.next_update_utc)
