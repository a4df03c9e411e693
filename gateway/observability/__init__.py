"""Observability for the gateway: structured logging (and, later, metrics and tracing)."""
