"""The proxy's data plane: routing, rewriting and forwarding requests."""
