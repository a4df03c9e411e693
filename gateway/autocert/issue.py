"""One ACME order, blocking: meant to run off the reactor thread.

Account (created or found by key), order for one domain, TLS-ALPN-01 for each
authorization (the validation certificate is published in ``PendingChallenges`` for
the listener to serve), finalisation with a fresh key's CSR (``must_staple`` adds the
status_request extension), full chain back.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from acme import client, crypto_util, errors, messages
from josepy.jwk import JWKRSA

from gateway.autocert.challenge import TLSALPN01, PendingChallenges
from gateway.autocert.storage import CertificateFiles, new_certificate_key

PRODUCTION = "https://acme-v02.api.letsencrypt.org/directory"
STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"


@dataclass(frozen=True)
class AcmeSettings:
    directory: str
    trusted_ca_file: str | None
    must_staple: bool
    timeout: float = 90.0


class AcmeError(Exception):
    """An order failed; the message says at which step and why."""


def certificate_request(domain: str, key_pem: bytes, must_staple: bool) -> bytes:
    """The CSR (PEM) for ``domain``; ``must_staple`` asks for the TLS Feature
    status_request extension (RFC 7633)."""
    return bytes(crypto_util.make_csr(key_pem, [domain], must_staple=must_staple))


def issue(settings: AcmeSettings, files: CertificateFiles, pending: PendingChallenges,
          domain: str) -> tuple[bytes, bytes]:
    """Obtain a certificate for ``domain``: (full chain PEM, private key PEM)."""
    account_key = JWKRSA(key=files.account_key())
    verify: bool | str = settings.trusted_ca_file or True
    net = client.ClientNetwork(account_key, user_agent="gateway-autocert",
                               verify_ssl=verify)  # type: ignore[arg-type]
    try:
        directory = client.ClientV2.get_directory(settings.directory, net)
        acme = client.ClientV2(directory, net)
        registration = messages.NewRegistration.from_data(terms_of_service_agreed=True)
        try:
            account = acme.new_account(registration)
        except errors.ConflictError as conflict:
            account = acme.query_registration(
                messages.RegistrationResource(uri=conflict.location, body=registration))
        net.account = account
        key_pem = new_certificate_key()
        csr = certificate_request(domain, key_pem, settings.must_staple)
        order = acme.new_order(csr)
        published: list[str] = []
        try:
            for authorization in order.authorizations:
                if authorization.body.status == messages.STATUS_VALID:
                    continue
                challenge = next((c for c in authorization.body.challenges
                                  if isinstance(c.chall, TLSALPN01)), None)
                if challenge is None:
                    raise AcmeError(f"{domain}: the CA offers no tls-alpn-01 challenge")
                response, validation = challenge.chall.response_and_validation(account_key)
                name = authorization.body.identifier.value
                pending.add(name, validation)
                published.append(name)
                acme.answer_challenge(challenge, response)
            deadline = datetime.datetime.now() + datetime.timedelta(seconds=settings.timeout)
            finished = acme.poll_and_finalize(order, deadline)
        finally:
            for name in published:
                pending.remove(name)
    except (errors.Error, messages.Error, OSError) as exc:
        raise AcmeError(f"{domain}: {exc}") from exc
    return finished.fullchain_pem.encode(), key_pem
