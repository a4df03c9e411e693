"""Which addresses a client ID metadata document may be fetched from.

A client id names a host of ``mcp_allowed_client_id_domains``, but what that name
resolves to is up to whoever runs its DNS: the fetch must not become a way into the
gateway's own network (SSRF; the CIMD draft's section on it requires refusing RFC 6890
special-use addresses). So only globally routable unicast addresses are fetched from,
every address a name resolves to is checked (one bad address refuses the name), and the
connection goes to the checked address (no second resolution an attacker's DNS could
answer differently). IPv6 forms that carry an IPv4 address (IPv4-mapped, NAT64, 6to4)
are judged by the IPv4 address they carry.

``mcp_client_id_metadata_allowed_networks`` exempts networks an operator serves
documents from on purpose (and the tests' loopback); the unspecified address and
multicast are never fetched from (``0.0.0.0`` reaches this machine on Linux).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_6TO4 = ipaddress.IPv6Network("2002::/16")


def parse_address(text: str) -> Address | None:
    """An address as a resolver gives it (an IPv6 zone ``%eth0`` dropped); None if it
    is not one."""
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (mapped ``::ffff:a.b.c.d``, NAT64
    ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::``), else None."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64[0]:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _NAT64[1]:
        # RFC 8215's local-use prefix: not a fixed embedding; refused as special-use below
        return None
    if address.sixtofour is not None and address in _6TO4:
        return address.sixtofour
    return None


def _kind(address: Address) -> str | None:
    """What special-use range ``address`` is in (None: a global unicast address)."""
    if address.is_unspecified:
        return "unspecified"
    if address.is_multicast:
        return "multicast"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local (cloud metadata services live here)"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "carrier-grade NAT (100.64.0.0/10)"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "site-local"
    if address.is_private:
        return "private"
    if address.is_reserved or not address.is_global:
        return "reserved or special-use"
    return None


def address_refusal(text: str, exempt: Iterable[Network] = ()) -> str | None:
    """Why a metadata document may not be fetched from ``text``, or None."""
    address = parse_address(text)
    if address is None:
        return f"{text!r} is not an IP address"
    carried = embedded_ipv4(address)
    judged: Address = carried if carried is not None else address
    kind = _kind(judged)
    if kind is None:
        return None
    if kind not in ("unspecified", "multicast"):
        networks = tuple(exempt)
        if any(_within(candidate, networks) for candidate in {address, judged}):
            return None
    shown = f"{address} ({judged})" if carried is not None else str(address)
    article = "an" if kind[0] in "aeiou" else "a"
    return (f"{shown} is {article} {kind} address: metadata documents are fetched only from "
            "public addresses (mcp_client_id_metadata_allowed_networks exempts networks)")


def _within(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address.version == n.version and address in n for n in networks)


def addresses_refusal(addresses: Iterable[str], exempt: Iterable[Network] = ()) -> str | None:
    """Why a name resolving to ``addresses`` may not be fetched from: the first bad
    address's reason (every one must be fetchable), or that there is none."""
    networks = tuple(exempt)
    seen = False
    for text in addresses:
        seen = True
        refusal = address_refusal(text, networks)
        if refusal is not None:
            return refusal
    return None if seen else "the name resolves to no address"
