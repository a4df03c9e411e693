"""gateway: an identity-aware access proxy on Twisted."""

__version__ = "0.1.0"
