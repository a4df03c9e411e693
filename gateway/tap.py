"""``twistd gateway``: options and validation before binding anything.

``Options.postOptions`` loads and validates the configuration; a bad one prints every
problem to stderr and exits 1 before any port is bound, with no traceback.
``makeService`` hands the snapshot to ``gateway.tree``, which wires the services, and
gives the global reactor the lean event loop (``twisted_ext.dispatch``), as
``gateway.worker`` does for a worker process.
"""

from __future__ import annotations

import sys

from twisted.application.service import IService
from twisted.python import usage

from gateway.config import ConfigErrors, load_snapshot
from gateway.tree import apply_logging, build_service_tree
from gateway.twisted_ext.dispatch import lean_dispatch


class Options(usage.Options):
    """Command-line options of ``twistd gateway``."""

    synopsis = "[--config FILE]"
    longdesc = (
        "Run the gateway. Settings come from FILE (YAML, JSON, TOML or .properties, by "
        "extension) and from environment variables, which win over the file."
    )
    optParameters = [
        ["config", "c", None, "Configuration file (.yaml, .yml, .json, .toml, .properties)."],
        ["poll-interval", None, "1", "Seconds between checks of the configuration files."],
    ]

    def postOptions(self) -> None:
        try:
            snapshot = load_snapshot(self["config"])
        except ConfigErrors as exc:
            sys.stderr.write(f"gateway: {exc.render()}\n")
            for warning in exc.warnings:
                sys.stderr.write(f"gateway: warning: {warning}\n")
            sys.stderr.flush()
            raise SystemExit(1) from None
        try:
            self["poll-interval"] = float(self["poll-interval"])
        except ValueError:
            raise usage.UsageError("--poll-interval must be a number of seconds") from None
        self["snapshot"] = snapshot
        apply_logging(snapshot)
        parent = getattr(self, "parent", None)
        if parent is not None and not parent.get("logger"):
            # JSON lines by default, twistd's own start-up lines included.
            parent["logger"] = "gateway.observability.logging.observer"


def makeService(options: Options) -> IService:
    from twisted.internet import reactor

    lean_dispatch(reactor)

    return build_service_tree(
        options["snapshot"], options["config"], reactor, options["poll-interval"]
    )
