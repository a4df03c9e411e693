"""What a codec knows about its connection's TLS, computed once per connection."""

from __future__ import annotations

from typing import Any

from cryptography.hazmat.primitives.serialization import Encoding

from gateway.tls.client_certs import ClientCertPolicy
from gateway.tls.server import connection_tls, peer_chain


class ConnectionTLS:
    """Mixed into the codecs: SNI/certificate of the connection and cached client
    certificate verdicts (the handshake is over once a request arrives)."""

    transport: Any
    _tls: tuple[str, Any, Any] | None = None
    _verdicts: dict[int, str | None] | None = None
    _served = ""  # the last routed Host found to be servable on this connection

    def tls_info(self) -> tuple[str, Any, Any]:
        if self._tls is None:
            self._tls = connection_tls(self.transport)
        return self._tls

    def misdirected(self, host: str, routed: bool) -> str:
        """The host name (without port) when this connection may not serve ``host`` (a
        421), else "". The SNI's own name is served, and, for a routed host, any name
        the certificate chosen for the SNI would also be chosen for. An answer for a
        routed host holds for the connection's life: SNI and certificate do not change."""
        if routed and host == self._served:
            return ""
        sni, certificate, store = self.tls_info()
        if sni and store is not None and host != sni:  # (equal: the usual case, port 443)
            name = _hostname(host)
            if name != sni and (not routed or (
                    certificate is not None and not store.covers(certificate, name))):
                return name
        if routed:
            self._served = host
        return ""

    def client_certificate(self) -> bytes:
        """The client's certificate (DER), empty when it sent none; checked only by a
        route's ``client_cert_problem``."""
        chain = peer_chain(self.transport)
        return chain[0].public_bytes(Encoding.DER) if chain else b""

    def client_cert_problem(self, policy: ClientCertPolicy) -> str | None:
        verdicts = self._verdicts
        if verdicts is None:
            verdicts = self._verdicts = {}
        key = id(policy)
        if key not in verdicts:
            verdicts[key] = policy.check(peer_chain(self.transport))
        return verdicts[key]


def _hostname(host: str) -> str:
    """The Host value without its port (IPv6 literals keep their brackets)."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
