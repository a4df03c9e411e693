"""A worker process: ``python -m gateway.worker --index N [--config FILE]
--listen ADDRESS=FD ...``, started by the supervisor (``gateway.workers.supervisor``),
never by hand. It runs the tree ``gateway.tree`` builds for one worker, on the
supervisor's listening sockets, until the supervisor goes away.
"""

from __future__ import annotations

import base64
import signal
import sys
from collections.abc import Sequence

from twisted.logger import globalLogBeginner

from gateway.config import ConfigErrors, load_snapshot
from gateway.config.running import ConfigSource
from gateway.observability import logging as gateway_logging
from gateway.tree import apply_logging, build_service_tree
from gateway.twisted_ext.dispatch import lean_dispatch
from gateway.twisted_ext.stdio import PosixStandardIO
from gateway.workers.child import (
    SupervisorLink,
    WorkerLog,
    parse_arguments,
    read_first_message,
)
from gateway.workers.control import REPLY_FD
from gateway.workers.role import WorkerRole


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # reloads come from the supervisor
    # Stops come from the supervisor too (SIGTERM): a Ctrl-C reaches every process of
    # the terminal's group, and the supervisor's SIGTERM right after it would be a
    # second stop signal, which cuts the drain short (services.drain). Twisted leaves
    # an ignored SIGINT ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    observer = WorkerLog(gateway_logging.observer(), args.index)
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
    try:
        start = read_first_message(0)
        config = base64.b64decode(start.get("config") or "", validate=True) \
            if args.config else None
        snapshot = load_snapshot(args.config, file_bytes=config)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"gateway worker {args.index}: no start message from the "
                         f"supervisor: {exc}\n")
        raise SystemExit(1) from None
    except ConfigErrors as exc:
        sys.stderr.write(f"gateway worker {args.index}: {exc.render()}\n")
        raise SystemExit(1) from None

    from twisted.internet import reactor

    lean_dispatch(reactor)
    apply_logging(snapshot)
    link = SupervisorLink(reactor)
    root = build_service_tree(snapshot, args.config, reactor,
                              worker=WorkerRole(args.index, args.inherited, link.ready))
    source = root.getServiceNamed("config")
    assert isinstance(source, ConfigSource)
    link.source = source
    PosixStandardIO(link, stdin=0, stdout=REPLY_FD, reactor=reactor)
    root.privilegedStartService()
    reactor.callWhenRunning(root.startService)
    reactor.addSystemEventTrigger("before", "shutdown", setattr, link, "stopping", True)
    reactor.addSystemEventTrigger("before", "shutdown", root.stopService)
    reactor.run()


if __name__ == "__main__":
    main()
