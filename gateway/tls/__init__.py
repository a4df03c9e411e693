"""TLS toward clients: certificates chosen by SNI, client certificates, hot reload."""
