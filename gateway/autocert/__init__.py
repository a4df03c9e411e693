"""Automatic certificates through ACME with the TLS-ALPN-01 challenge (``autocert``)."""
