"""What a codec knows about its connection's TLS, computed once per connection."""

from __future__ import annotations

from typing import Any

from gateway.tls.client_certs import ClientCertPolicy
from gateway.tls.server import connection_tls, peer_chain


class ConnectionTLS:
    """Mixed into the codecs: SNI/certificate of the connection and cached client
    certificate verdicts (the handshake is over once a request arrives)."""

    transport: Any
    _tls: tuple[str, Any, Any] | None = None
    _verdicts: dict[int, str | None] | None = None

    def tls_info(self) -> tuple[str, Any, Any]:
        if self._tls is None:
            self._tls = connection_tls(self.transport)
        return self._tls

    def client_cert_problem(self, policy: ClientCertPolicy) -> str | None:
        verdicts = self._verdicts
        if verdicts is None:
            verdicts = self._verdicts = {}
        key = id(policy)
        if key not in verdicts:
            verdicts[key] = policy.check(peer_chain(self.transport))
        return verdicts[key]
