"""Observability for the gateway: structured logging, Prometheus metrics, tracing."""
