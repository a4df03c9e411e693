"""TLS towards the kvstore (``kvstores://`` and friends).

``databroker_storage_ca_file`` replaces the system roots, ``databroker_storage_cert_file``
and ``_key_file`` present a client certificate (Redis ``tls-auth-clients yes``), and
``databroker_storage_tls_skip_verify`` accepts any server certificate and name. The
contexts are the data plane's upstream ones (``connection_creator``), without ALPN. Host
names are checked per connection because Sentinel names the master only at connect time.
Sentinel over TLS is ``gateway.adapters.txredis.TLSSentinel`` (it overrides txredisapi's
private steps).
"""

from __future__ import annotations

from gateway.adapters.txredis import TLSFor
from gateway.tls.client import TLSClientConfig, connection_creator


def tls_for_hosts(
    ca_pem: bytes | None,
    client_certificate: tuple[bytes, bytes] | None,
    skip_verify: bool,
) -> TLSFor:
    """Return ``host -> connection creator`` for txredisapi's ``ssl_context_factory``."""
    cert, key = client_certificate or (None, None)
    config = TLSClientConfig("", skip_verify, ca_pem, cert, key, alpn=())
    return lambda host: connection_creator(config, host)
