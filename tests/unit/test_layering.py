"""The package layering that ``docs/ARCHITECTURE.md`` documents, held by the code.

Every ``import`` of a gateway module (at the top, inside a function or under
``TYPE_CHECKING``: each is a dependency) must point down the tiers below, or stay inside
its own package. Inside the data plane the order of ``gateway/dataplane/__init__.py``
holds the same way. The wire layer imports no Twisted and nothing else of the gateway.
Read from the source with ``ast``: nothing is imported to check it. The boundary of
another kind, that only ``twisted_ext`` and ``adapters`` use a library's private names,
is held by ``test_private_names.py``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from twisted.trial.unittest import SynchronousTestCase

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"

# Top to bottom; a unit may import only units of lower tiers (and itself).
TIERS: tuple[tuple[str, ...], ...] = (
    ("tap", "worker"),
    ("tree",),
    ("rpc",),
    ("services", "ssh"),
    ("workers", "authenticate", "cli"),
    # the authorization server of MCP clients: served by the sign-in web app, over the
    # databroker's records, the pages and the decision
    ("mcp_oauth",),
    ("dataplane", "databroker", "bearer_jwt"),
    ("directory", "authorize"),
    ("tls", "observability", "pages"),
    ("autocert", "sessions", "net", "mcp"),
    ("config", "twisted_ext", "adapters", "budget", "caches", "private_dirs", "wire",
     "__init__"),
    # The policy language: pure, imports nothing of the gateway; config compiles a
    # route's policy with the route (so a bad one is refused at load), authorize decides
    # with it, the CLI explains it.
    ("policy",),
)
DATAPLANE: tuple[tuple[str, ...], ...] = (
    ("listeners",),
    ("codecs",),
    ("http2",),
    ("exchange",),
    ("forwardauth",),
    ("pipes", "health"),
    ("core",),
    ("routing",),
    ("upstream", "limit", "penalty"),
    ("__init__",),
)


def modules() -> Iterator[tuple[str, Path]]:
    for path in sorted(GATEWAY.rglob("*.py")):
        parts = path.relative_to(GATEWAY.parent).with_suffix("").parts
        yield ".".join(parts), path


def imported(path: Path) -> Iterator[tuple[str, int]]:
    """(module name, line) of every absolute import in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            for alias in node.names:  # ``from gateway import tree``
                yield f"{node.module}.{alias.name}", node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno


def unit(module: str, depth: int) -> str:
    """The package (or top-level module) ``module`` belongs to, ``depth`` dots in."""
    parts = module.split(".")
    return parts[depth] if len(parts) > depth else "__init__"


def tier_of(name: str, tiers: tuple[tuple[str, ...], ...]) -> int | None:
    return next((i for i, names in enumerate(tiers) if name in names), None)


def violations(prefix: str, depth: int, tiers: tuple[tuple[str, ...], ...]) -> list[str]:
    found: list[str] = []
    known = {m for m, _ in modules()}
    for module, path in modules():
        if not (module == prefix or module.startswith(prefix + ".")):
            continue
        source = unit(module, depth)
        source_tier = tier_of(source, tiers)
        if source_tier is None:
            found.append(f"{module}: {source!r} has no place in the tiers")
            continue
        for target, line in imported(path):
            in_tree = target in known or target.rsplit(".", 1)[0] in known
            if not (target.startswith(prefix + ".") and in_tree):
                continue
            dest = unit(target, depth)
            if dest == source:
                continue
            dest_tier = tier_of(dest, tiers)
            if dest_tier is None or dest_tier <= source_tier:
                found.append(f"{module}:{line} imports {target} ({source} may not "
                             f"import {dest})")
    return found


class LayeringTests(SynchronousTestCase):
    def test_every_package_has_a_tier(self) -> None:
        """A new package or top-level module must be placed (and documented)."""
        placed = {name for names in TIERS for name in names}
        actual = {unit(m, 1) for m, _ in modules()}
        self.assertEqual(actual - placed, set())

    def test_packages_import_only_downwards(self) -> None:
        self.assertEqual(violations("gateway", 1, TIERS), [])

    def test_dataplane_order(self) -> None:
        self.assertEqual(violations("gateway.dataplane", 2, DATAPLANE), [])

    def test_wire_layer_is_plain(self) -> None:
        """No Twisted and nothing of the gateway's outside it: parsers with no I/O."""
        found = []
        for module, path in modules():
            if not module.startswith("gateway.wire"):
                continue
            for target, line in imported(path):
                if target.split(".")[0] in ("twisted", "zope", "OpenSSL") or (
                        target.startswith("gateway.") and
                        not target.startswith("gateway.wire")):
                    found.append(f"{module}:{line} imports {target}")
        self.assertEqual(found, [])

    def test_the_check_sees_a_violation(self) -> None:
        """The checker itself can fail: an import up the tiers is reported."""
        tiers = (("wire",), ("dataplane", "__init__"))
        self.assertTrue(any("may not import" in v
                            for v in violations("gateway", 1, tiers)))
