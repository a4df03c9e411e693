"""``source_ip``: networks as configured, and the client address tested against them.

A network with host bits set (``10.0.0.1/8``) is refused rather than widened or
narrowed silently. A client address that is empty or does not parse matches no network;
an IPv4 address written as IPv6 (``::ffff:192.0.2.1``) is tested as the IPv4 address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from gateway.policy.nodes import Networks
from gateway.policy.operands import show
from gateway.policy.problems import Problems

_PARSED: dict[str, tuple[int, int] | None] = {}
_PARSED_MAX = 4096


def parse_networks(value: Any, where: str, problems: Problems) -> Networks | None:
    """One address or CIDR, or a non-empty list of them."""
    items = value if isinstance(value, list) else [value]
    if not items:
        problems.error(where, "empty list: give at least one address or CIDR")
        return None
    cidrs: list[str] = []
    ok = True
    for i, item in enumerate(items):
        at = f"{where}[{i}]" if isinstance(value, list) else where
        network = _network(item, at, problems)
        if network is None:
            ok = False
        elif network not in cidrs:
            cidrs.append(network)
    return Networks(tuple(cidrs)) if ok else None


def _network(item: Any, where: str, problems: Problems) -> str | None:
    if not isinstance(item, str):
        problems.error(where, f"not a CIDR: {show(item)}")
        return None
    try:
        return str(ipaddress.ip_network(item.strip()))
    except ValueError as exc:
        if "host bits set" in str(exc):
            loose = ipaddress.ip_network(item.strip(), strict=False)
            problems.error(where, f"not a CIDR: {show(item)} has host bits set; the "
                                  f"network is {loose}, the one address {item.split('/')[0]}")
        else:
            problems.error(where, f"not a CIDR: {show(item)}")
        return None


def client_address(text: str) -> tuple[int, int] | None:
    """(IP version, address as an integer), or ``None`` when ``text`` is no address.
    Remembered for the next requests from the same client."""
    try:
        return _PARSED[text]
    except KeyError:
        pass
    parsed: tuple[int, int] | None
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        parsed = None
    else:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        parsed = (address.version, int(address))
    if len(text) <= 64:  # no address is longer; a longer text is not worth keeping
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = parsed
    return parsed


def network_test(networks: Networks) -> Callable[[str], bool]:
    """Whether a client address (text) is in any of ``networks``: one set lookup per
    distinct (version, prefix length), and the answer remembered for the address (a
    route's clients come back: the criterion runs for every request of theirs)."""
    grouped: dict[tuple[int, int], set[int]] = {}
    for cidr in networks.cidrs:
        net = ipaddress.ip_network(cidr)
        shift = net.max_prefixlen - net.prefixlen
        grouped.setdefault((net.version, shift), set()).add(int(net.network_address) >> shift)
    groups = tuple((version, shift, frozenset(nets))
                   for (version, shift), nets in grouped.items())

    answers: dict[str, bool] = {}

    def test(text: str) -> bool:
        answer = answers.get(text)
        if answer is None:
            answer = _inside(client_address(text), groups)
            if len(text) <= 64:  # as for the parses: no address is longer
                if len(answers) >= _PARSED_MAX:
                    answers.clear()
                answers[text] = answer
        return answer

    return test


def _inside(parsed: tuple[int, int] | None,
            groups: tuple[tuple[int, int, frozenset[int]], ...]) -> bool:
    if parsed is None:
        return False
    version, value = parsed
    for net_version, shift, nets in groups:
        if net_version == version and value >> shift in nets:
            return True
    return False
