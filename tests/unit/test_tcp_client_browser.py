"""Opening the sign-in URL: the command line built from --browser-cmd (or Python's
webbrowser), and a child process that can never write into a stdin/stdout tunnel."""

from __future__ import annotations

import sys
from typing import Any

from twisted.internet.error import ProcessDone, ProcessTerminated
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase

from gateway.cli.tcp.browser import browser_argv, open_in_browser

URL = "http://authenticate.example.com/.gateway/sign_in?gateway_redirect=a&b=c"


class FakeProcessTransport:
    def __init__(self) -> None:
        self.stdin_closed = False

    def closeStdin(self) -> None:
        self.stdin_closed = True


class SpawningReactor:
    """Records spawnProcess calls (the one reactor method the opener uses)."""

    def __init__(self) -> None:
        self.spawned: list[dict[str, Any]] = []

    def spawnProcess(self, protocol: Any, executable: str, args: list[str],
                     env: dict[str, str], childFDs: dict[int, Any]) -> None:
        transport = FakeProcessTransport()
        protocol.makeConnection(transport)
        self.spawned.append({"protocol": protocol, "executable": executable, "args": args,
                             "childFDs": childFDs, "transport": transport})


class BrowserTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.reactor = SpawningReactor()
        self.warnings: list[str] = []

    def test_command_split_like_a_shell_and_the_url_last(self) -> None:
        self.assertEqual(browser_argv("firefox --new-window", URL),
                         ["firefox", "--new-window", URL])
        self.assertEqual(browser_argv("'/opt/my browser/run' -x", URL),
                         ["/opt/my browser/run", "-x", URL])

    def test_default_is_webbrowser_in_a_child(self) -> None:
        argv = browser_argv(None, URL)
        self.assertEqual(argv[0], sys.executable)
        self.assertIn("webbrowser.open(sys.argv[1])", argv[2])
        self.assertEqual(argv[-1], URL)

    def test_child_output_goes_to_stderr_and_stdin_is_closed(self) -> None:
        open_in_browser(self.reactor, "true", URL, self.warnings.append)
        [spawned] = self.reactor.spawned
        self.assertEqual(spawned["args"], ["true", URL])
        self.assertEqual(spawned["childFDs"], {0: "w", 1: 2, 2: 2})
        self.assertTrue(spawned["transport"].stdin_closed)
        spawned["protocol"].processEnded(Failure(ProcessDone(0)))
        self.assertEqual(self.warnings, [])

    def test_failures_are_warnings_only(self) -> None:
        open_in_browser(self.reactor, "no-such-browser-here", URL, self.warnings.append)
        open_in_browser(self.reactor, "'unbalanced", URL, self.warnings.append)
        open_in_browser(self.reactor, "false", URL, self.warnings.append)
        self.reactor.spawned[0]["protocol"].processEnded(
            Failure(ProcessTerminated(exitCode=1)))
        open_in_browser(self.reactor, None, URL, self.warnings.append)
        self.reactor.spawned[1]["protocol"].processEnded(
            Failure(ProcessTerminated(exitCode=3)))
        self.assertEqual(self.warnings, [
            "browser command not found: no-such-browser-here; open the URL above yourself",
            "cannot parse --browser-cmd (No closing quotation); open the URL above yourself",
            "the browser command false exited with status 1; open the URL above yourself",
            "no web browser found; open the URL above yourself",
        ])
