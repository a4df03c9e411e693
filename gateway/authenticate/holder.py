"""The data plane's authorizer across reloads: a new ``Identity`` per snapshot, with
the session store and the signing key kept (sessions survive reloads)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from gateway.authenticate.identity import Identity
from gateway.authorize.assertion import AssertionSigner
from gateway.config.snapshot import Snapshot
from gateway.dataplane.authz import Decision, RequestInfo
from gateway.sessions.store import MemorySessionStore, SessionStore

log = Logger()


def _signer(snapshot: Snapshot, previous: AssertionSigner | None) -> AssertionSigner:
    o = snapshot.options
    issuer = urlsplit(o.authenticate_service_url).netloc if o.authenticate_service_url else ""
    key = snapshot.material.signing_key
    if previous is not None and previous.ephemeral and key is None and \
            previous.algorithm == o.signing_key_algorithm and previous.issuer == issuer:
        return previous  # keep the ephemeral key across reloads
    signer = AssertionSigner(key, o.signing_key_algorithm, issuer)
    if signer.ephemeral:
        log.warn("signing_key is not set: identity assertions are signed with an ephemeral "
                 "{alg} key (public key {public}); it is not served on the JWKS endpoint",
                 alg=o.signing_key_algorithm, public=signer.public_key_b64())
    return signer


def session_store(reactor: Any, snapshot: Snapshot) -> SessionStore:
    """Memory by default; kvstore (Redis) with ``databroker_storage_type: kvstore``."""
    o = snapshot.options
    if o.databroker_storage_type != "kvstore":
        return MemorySessionStore()
    from gateway.config.kvstore_dsn import parse_dsn
    from gateway.databroker.cipher import RecordCipher
    from gateway.databroker.kv_sessions import KVSessionStore
    from gateway.databroker.kv_tls import tls_for_hosts

    m = snapshot.material
    tls_for = tls_for_hosts(m.storage_ca, m.storage_client_certificate,
                            o.databroker_storage_tls_skip_verify)
    return KVSessionStore(reactor, parse_dsn(o.databroker_storage_connection_string),
                          RecordCipher(m.shared_secret), tls_for=tls_for)


class IdentityHolder:
    def __init__(self, reactor: Any, snapshot: Snapshot,
                 store: SessionStore | None = None) -> None:
        self.reactor = reactor
        self.store = store or session_store(reactor, snapshot)
        self.signer = _signer(snapshot, None)
        self.identity = Identity(reactor, snapshot, self.store, self.signer)

    def apply(self, snapshot: Snapshot) -> None:
        self.signer = _signer(snapshot, self.signer)
        self.identity = Identity(self.reactor, snapshot, self.store, self.signer)

    def authorize(self, request: RequestInfo, route: object) -> Decision | Deferred[Decision]:
        return self.identity.authorize(request, route)

    def handles(self, host: str, path: str) -> bool:
        return self.identity.handles(host, path)

    def internal(self, request: RequestInfo, body: bytes = b""
                 ) -> Decision | Deferred[Decision] | None:
        return self.identity.internal(request, body)
