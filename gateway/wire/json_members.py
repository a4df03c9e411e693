"""JSON objects whose member names all differ, for ``json``'s ``object_pairs_hook``.

Where two readers of one document may keep different copies of a name given twice (the
gateway and an MCP server, the gateway and a token's issuer), the document is refused:
a JSON-RPC body, an MCP list result, a client metadata document, a JWS header or claims.
"""

from __future__ import annotations

from typing import Any


class DuplicateMember(ValueError):
    """An object names ``name`` twice."""

    def __init__(self, name: str) -> None:
        super().__init__(f"duplicate member {name!r}")
        self.name = name


def unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """The object of ``pairs``; ``DuplicateMember`` when a name comes twice."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise DuplicateMember(name)
            seen.add(name)
    return value
