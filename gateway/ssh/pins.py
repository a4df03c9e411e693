"""Trust on first use of a server's host key (``ssh_upstream_host_key_tofu``), decided
before the gateway connects, once among every process that shares the databroker
(workers, several gateways).

Before: the key exchange cannot wait for the databroker. Conch's client reads the
packets the server sends after its NEWKEYS (OpenSSH's EXT_INFO) with the old keys when
the host key check has not answered yet, so a check that waits for Redis breaks the
connection. The pinned key is read first and the check itself never waits.

Once: reading "no pin yet" and writing one are two steps; two connections meeting a
route's server for the first time at once, one through a machine in the middle, would
each pin the key they saw. A lease named after the route lets one connection pin;
another waits for that pin and compares with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gateway.databroker.records import RecordStore
from gateway.databroker.ssh_records import pin_host_key, pinned_host_key

LEASE_SECONDS = 30.0  # longer than a connection takes to reach the key exchange
WAIT_SECONDS = 3.0  # how long a connection waits for another's pin to appear
POLL_SECONDS = 0.1


@dataclass
class Claim:
    """What a connection to a TOFU route may trust: ``pinned``, or with ``may_pin`` the
    key it meets (it holds the route's lease); neither: another connection is pinning
    and its pin did not appear in time."""

    route: str
    holder: str
    pinned: bytes | None = None
    may_pin: bool = False


def lease_name(route: str) -> str:
    return f"ssh-host-pin:{route}"


async def claim(records: RecordStore, route: str, holder: str,
                sleep: Callable[[float], Awaitable[object]]) -> Claim:
    pinned = await pinned_host_key(records, route)
    if pinned is not None:
        return Claim(route, holder, pinned)
    if await records.lease(lease_name(route), holder, LEASE_SECONDS):
        pinned = await pinned_host_key(records, route)  # (pinned before the lease?)
        if pinned is not None:
            await records.release(lease_name(route), holder)
            return Claim(route, holder, pinned)
        return Claim(route, holder, may_pin=True)
    for _ in range(int(WAIT_SECONDS / POLL_SECONDS)):
        await sleep(POLL_SECONDS)
        pinned = await pinned_host_key(records, route)
        if pinned is not None:
            return Claim(route, holder, pinned)
    return Claim(route, holder)


async def pin(records: RecordStore, held: Claim, blob: bytes) -> None:
    """The key the lease holder met, pinned; the lease given up."""
    try:
        await pin_host_key(records, held.route, blob)
    finally:
        await records.release(lease_name(held.route), held.holder)


async def give_up(records: RecordStore, held: Claim) -> None:
    """The lease holder never met a key (the server was unreachable)."""
    await records.release(lease_name(held.route), held.holder)
