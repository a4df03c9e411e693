"""The databroker: where sessions and directory users and groups are kept (memory or
Redis), and the change stream every process sharing them follows."""
