"""The databroker: where sessions (and later users and groups) are kept."""
