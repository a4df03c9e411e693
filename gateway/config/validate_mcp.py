"""The MCP client settings' rules (``mcp_allowed_client_id_domains``,
``mcp_client_id_metadata_allowed_networks``, ``mcp_client_id_metadata_ca_file``).
Part of ``validate``; ``gateway.mcp_oauth.clients`` reads the same values through
``allowed_hosts`` and ``allowed_networks``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from typing import Any

from gateway.config.errors import Problems
from gateway.config.material import Pem, Reader, load_material
from gateway.config.routes import Route
from gateway.config.settings import Options

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# a DNS name of LDH labels (IDNs in their xn-- form), as a client id URL's host is compared
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


def host_problem(entry: str) -> str | None:
    """Why ``entry`` cannot be a ``mcp_allowed_client_id_domains`` host, or None.

    Entries are exact hosts: a client id URL's host must equal one (no subdomains, no
    wildcards), so an operator allowing ``claude.ai`` does not also allow whoever
    controls a name under it."""
    if not entry or entry != entry.strip():
        return f"{entry!r} is not a host name"
    if "*" in entry:
        return (f"{entry!r}: wildcards are not supported; list each exact host (a client "
                "id URL's host must equal an entry)")
    if "://" in entry or "/" in entry:
        return f"{entry!r}: write the host alone, without a scheme or path (e.g. claude.ai)"
    try:
        ipaddress.ip_address(entry)
        return None
    except ValueError:
        pass
    lowered = entry.lower()
    if lowered != entry:
        return f"{entry!r}: write the host in lower case ({lowered})"
    if ":" in entry:
        return f"{entry!r}: write the host alone, without a port"
    if len(entry) > 253 or not all(_LABEL.match(label) for label in entry.split(".")):
        return (f"{entry!r} is not a DNS host name (letters, digits and hyphens; an "
                "internationalised name in its xn-- form)")
    return None


def allowed_hosts(options: Options) -> frozenset[str]:
    """The hosts client id URLs may name (the valid entries)."""
    return frozenset(h for h in options.mcp_allowed_client_id_domains if host_problem(h) is None)


def network_of(entry: str) -> Network:
    """One ``mcp_client_id_metadata_allowed_networks`` entry; ValueError says why not."""
    try:
        return ipaddress.ip_network(entry.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(f"{entry!r} is not a network in CIDR form (e.g. 10.20.0.0/16): "
                         f"{exc}") from None


def allowed_networks(options: Options) -> tuple[Network, ...]:
    found: list[Network] = []
    for entry in options.mcp_client_id_metadata_allowed_networks:
        try:
            found.append(network_of(entry))
        except ValueError:
            continue
    return tuple(found)


def mcp_clients(options: Options, reader: Reader, problems: Problems,
                material: dict[str, Any]) -> None:
    """Each allowed host and network checked; the fetch's CA bundle read."""
    for index, entry in enumerate(options.mcp_allowed_client_id_domains):
        problem = host_problem(entry)
        if problem is not None:
            problems.error(f"mcp_allowed_client_id_domains[{index}]", problem)
    for index, entry in enumerate(options.mcp_client_id_metadata_allowed_networks):
        try:
            network_of(entry)
        except ValueError as exc:
            problems.error(f"mcp_client_id_metadata_allowed_networks[{index}]", str(exc))
    material["mcp_client_id_metadata_ca"] = load_material(
        reader, problems, inline_key="mcp_client_id_metadata_ca_file", inline="",
        file_key="mcp_client_id_metadata_ca_file",
        file=options.mcp_client_id_metadata_ca_file, kind=Pem.CERTS)


def mcp_resources_distinct(routes: Iterable[Route], problems: Problems) -> None:
    """No two MCP routes of one host share a resource identifier (the host, plus the
    route's ``path`` or ``prefix`` without its trailing slash; a regex route's is the
    bare host, as ``gateway.mcp_oauth.resources`` makes it): a token is bound to its
    identifier, so one issued for either route would be taken by the other, whose
    policy and consent were never asked (a security review found ``path: /mcp`` beside
    ``prefix: /mcp/``, and every regex route beside the route on ``/``)."""
    seen: dict[tuple[str, int | None, str], int] = {}
    for route in routes:
        if route.mcp is None:
            continue
        key = (route.host.lower(), route.port, (route.path or route.prefix).rstrip("/"))
        first = seen.setdefault(key, route.index)
        if first != route.index:
            identifier = f"{route.scheme}://{route.host}" + \
                (f":{route.port}" if route.port is not None else "") + key[2]
            problems.error(f"policy[{route.index}].mcp",
                           f"policy[{first}] is the same MCP resource ({identifier}): a "
                           "token issued for one would be taken by the other; give each "
                           "MCP route of a host its own path or prefix")
