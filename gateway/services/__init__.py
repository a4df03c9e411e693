"""The services of the tree: the proxy (listeners and data plane), the metrics endpoint,
readiness, and the logical services a split deployment names."""
