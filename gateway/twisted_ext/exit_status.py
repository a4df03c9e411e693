"""A SIGTERM stop that completed in order exits 0.

twistd re-raises the signal that stopped its reactor once it is done (the process
then ends "killed by SIGTERM"): systemd counts that as clean, but a container runtime
reports exit code 143, and operators of proxies that drain (nginx, Envoy, HAProxy)
expect 0 after a graceful stop. The signal is the reactor's ``_exitSignal``, read by
twistd after ``reactor.run`` returns; the only way to say "this stop was orderly" is
to clear it. A SIGINT (Ctrl-C) is left to be re-raised: a shell must see it.
"""

from __future__ import annotations

import signal
from typing import Any

RELIES_ON = (
    ("twisted.internet.base", "ReactorBase", ("_exitSignal",)),
)


def orderly_sigterm_exit(reactor: Any) -> None:
    """The stop now ending was asked by SIGTERM and went in order: exit status 0."""
    if getattr(reactor, "_exitSignal", None) == signal.SIGTERM:
        reactor._exitSignal = None
