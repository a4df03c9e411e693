"""Opening the sign-in URL in a browser, in a child process that cannot touch the tunnel.

The child's stdin is closed and its stdout goes to our stderr: with ``--listen -`` our
stdout *is* the tunnel, and a chatty browser must not write into an SSH stream. The
default is Python's ``webbrowser`` run in that child. Failures are warnings only: the
URL has been printed, a person can open it by hand.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from typing import Any

from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

WEBBROWSER = ("import sys, webbrowser\n"
              "sys.exit(0 if webbrowser.open(sys.argv[1]) else 3)\n")


def browser_argv(cmd: str | None, url: str) -> list[str]:
    """``--browser-cmd`` split like a shell would, the URL appended; or the default."""
    if cmd:
        return [*shlex.split(cmd), url]
    return [sys.executable, "-c", WEBBROWSER, url]


class _Watch(ProcessProtocol):
    transport: Any
    def __init__(self, name: str, warn: Callable[[str], None]) -> None:
        self.name = name
        self.warn = warn

    def connectionMade(self) -> None:
        self.transport.closeStdin()

    def processEnded(self, reason: Failure) -> None:
        code = getattr(reason.value, "exitCode", 0)
        if code == 3 and self.name == "webbrowser":
            self.warn("no web browser found; open the URL above yourself")
        elif code:
            self.warn(f"the browser command {self.name} exited with status {code}; "
                      "open the URL above yourself")


def open_in_browser(reactor: Any, cmd: str | None, url: str,
                    warn: Callable[[str], None]) -> None:
    """Start the browser on ``url`` and return at once."""
    try:
        argv = browser_argv(cmd, url)
    except ValueError as exc:
        warn(f"cannot parse --browser-cmd ({exc}); open the URL above yourself")
        return
    executable = shutil.which(argv[0])
    if executable is None:
        warn(f"browser command not found: {argv[0]}; open the URL above yourself")
        return
    name = "webbrowser" if not cmd else argv[0]
    reactor.spawnProcess(_Watch(name, warn), executable, argv, env=dict(os.environ),
                         childFDs={0: "w", 1: 2, 2: 2})
