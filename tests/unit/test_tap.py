"""twistd options, the service tree, SIGHUP wiring and the `gateway` command."""

from __future__ import annotations

import io
import os
import signal
import sys
import tempfile
from typing import Any

import yaml
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.logger import LogLevel, globalLogPublisher
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from gateway import tap, tree
from gateway.cli import main as cli_main
from gateway.config import load_snapshot
from gateway.config.running import ConfigSource

from .config.helpers import IDENTITY, SECRET, base_config, write


def config_file(**extra: Any) -> str:
    return write(tempfile.mkdtemp(), "gateway.yaml", yaml.safe_dump(base_config(**extra)))


class ParentOptions(dict[str, Any]):
    """Stands in for twistd's ServerOptions, which the subcommand sees as ``parent``."""


class OptionsTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.stderr = io.StringIO()
        self.patch(sys, "stderr", self.stderr)

    def test_bad_config_exits_1_with_every_problem(self) -> None:
        """A bad config prints all problems to stderr and exits 1 (no traceback)."""
        path = config_file(services="blue", policy=[{"from": "https://x/a", "to": "http://b"}])
        options = tap.Options()
        with self.assertRaises(SystemExit) as caught:
            options.parseOptions(["--config", path])
        self.assertEqual(caught.exception.code, 1)
        text = self.stderr.getvalue()
        self.assertIn(f"gateway: invalid configuration in {path} (2 problems):", text)
        self.assertIn("services: config: blue is an invalid service type", text)
        self.assertIn("policy[0].from: config: policy source url (https://x/a) contains a path",
                      text)
        self.assertNotIn("Traceback", text)

    def test_good_config_sets_snapshot_and_json_logger(self) -> None:
        """A good config is loaded once and twistd is told to use the JSON observer."""
        options = tap.Options()
        options.parent = ParentOptions(logger=None)
        options.parseOptions(["--config", config_file()])
        self.assertTrue(options["snapshot"].options.insecure_server)
        self.assertEqual(options.parent["logger"], "gateway.observability.logging.observer")

    def test_explicit_logger_is_kept(self) -> None:
        """An operator's own --logger wins over ours."""
        options = tap.Options()
        options.parent = ParentOptions(logger="my.observer")
        options.parseOptions(["--config", config_file()])
        self.assertEqual(options.parent["logger"], "my.observer")

    def test_poll_interval_must_be_a_number(self) -> None:
        """--poll-interval is validated."""
        self.assertRaises(usage.UsageError, tap.Options().parseOptions,
                          ["--config", config_file(), "--poll-interval", "soon"])


class ServiceTreeTests(SynchronousTestCase):
    def tree(self, **extra: Any) -> Any:
        path = config_file(**extra)
        return tree.build_service_tree(load_snapshot(path, {}), path, MemoryReactorClock())

    def names(self, root: Any) -> list[str]:
        return [type(s).__name__ for s in root]

    def test_all_in_one(self) -> None:
        """`all` runs config, SIGHUP, databroker, authorize, authenticate and proxy, and
        the bearer providers' key sources, the audit stream and the OTLP metrics push
        (idle until configured, so that a reload can turn them on)."""
        self.assertEqual(self.names(self.tree()), [
            "ConfigSource", "SighupService", "DataBrokerService", "AuthorizeService",
            "AuthenticateService", "BearerVerifiers", "AuditService", "ProxyService",
            "MetricsPushService", "ReadyService"])

    def test_debug_mode_warns_at_startup(self) -> None:
        """gateway_debug logs may show sensitive data: say so once, at startup."""
        seen: list[dict[str, Any]] = []
        globalLogPublisher.addObserver(seen.append)
        self.addCleanup(globalLogPublisher.removeObserver, seen.append)
        self.tree()
        self.assertFalse([e for e in seen if "gateway_debug is on" in str(e.get("log_format"))])
        self.tree(gateway_debug=True)
        warned = [e for e in seen if "gateway_debug is on" in str(e.get("log_format"))]
        self.assertEqual(len(warned), 1)
        self.assertEqual(warned[0]["log_level"], LogLevel.warn)

    def test_single_services(self) -> None:
        """Each `services` value runs its own service (authenticate also listens). The
        proxy and authenticate services without the databroker service still have their
        own record store (memory, or the kvstore they share with the others)."""
        secrets = {"shared_secret": SECRET, "cookie_secret": SECRET, **IDENTITY}
        expected = {
            "databroker": ["BridgeService", "MetricsPushService", "ReadyService"],
            # the bearer providers' key sources where routes' requests are decided
            "authorize": ["BridgeService", "AuthorizeService", "BearerVerifiers",
                          "MetricsPushService", "ReadyService"],
            # the audit stream where requests end: the processes with a data plane
            "authenticate": ["Databroker", "AuthenticateService", "AuditService",
                             "ProxyService", "MetricsPushService", "ReadyService"],
            "proxy": ["Databroker", "BearerVerifiers", "AuditService", "ProxyService",
                      "MetricsPushService", "ReadyService"],
        }
        for service, names in expected.items():
            root = self.tree(services=service, grpc_insecure=True, **secrets)
            self.assertEqual(self.names(root)[2:], names, service)
        # the databroker and its gRPC server (with the tracing that continues callers'
        # traces) run under the thread they use
        root = self.tree(services="databroker", grpc_insecure=True, **secrets)
        bridge = next(s for s in root if type(s).__name__ == "BridgeService")
        self.assertEqual(self.names(bridge),
                         ["DataBrokerService", "TracingService", "GrpcServerService"])
        # authorize: its sessions (own store here) and its gRPC server, no HTTP listener
        root = self.tree(services="authorize", grpc_insecure=True, **secrets)
        bridge = next(s for s in root if type(s).__name__ == "BridgeService")
        self.assertEqual(self.names(bridge),
                         ["Databroker", "TracingService", "GrpcServerService"])

    def test_split_processes_use_the_databroker_over_grpc(self) -> None:
        """With databroker_service_url(s), the proxy and authenticate services keep their
        records in the databroker process (a remote store behind the same Databroker);
        the databroker runs under the bridge thread's service, which stops the thread only
        after it."""
        secrets = {"shared_secret": SECRET, "cookie_secret": SECRET, **IDENTITY}
        for service in ("proxy", "authenticate"):
            root = self.tree(services=service, databroker_service_urls=[
                "http://127.0.0.1:5443", "http://[::1]:5443"], **secrets)
            names = self.names(root)
            self.assertEqual(names[2], "BridgeService", service)
            bridge = next(s for s in root if type(s).__name__ == "BridgeService")
            self.assertEqual(self.names(bridge), ["Databroker"], service)
            broker = next(iter(bridge))
            self.assertEqual(broker.store.backend, "remote")
            self.assertEqual([t.address for t in broker.store.targets],
                             ["127.0.0.1:5443", "[::1]:5443"])
        root = self.tree(services="authorize", databroker_service_url="http://127.0.0.1:5443",
                         grpc_insecure=True, **secrets)
        bridge = next(s for s in root if type(s).__name__ == "BridgeService")
        self.assertEqual(next(iter(bridge)).store.backend, "remote")

    def test_a_proxy_with_authorize_service_urls_asks_authorize(self) -> None:
        """authorize_service_url(s): the data plane's authorizer is the gRPC client (the
        gateway's own endpoints stay local); without them, decisions stay in process."""
        from gateway.rpc.authorize_client import RemoteAuthorizer

        secrets = {"shared_secret": SECRET, "cookie_secret": SECRET, **IDENTITY}
        root = self.tree(services="proxy", authorize_service_urls=[
            "http://127.0.0.1:5443", "http://127.0.0.1:5444"], **secrets)
        proxy = next(s for s in root if type(s).__name__ == "ProxyService")
        authorizer = proxy.core.authorizer
        self.assertIsInstance(authorizer, RemoteAuthorizer)
        self.assertEqual([t.address for t in authorizer.client.targets],
                         ["127.0.0.1:5443", "127.0.0.1:5444"])
        # under the bridge: the client's channels close on stop, and the signing-key check
        bridge = next(s for s in root if type(s).__name__ == "BridgeService")
        self.assertEqual(self.names(bridge), ["Databroker", "ClosingService", "SigningKeyCheck"])
        root = self.tree(services="proxy", **secrets)
        proxy = next(s for s in root if type(s).__name__ == "ProxyService")
        self.assertEqual(type(proxy.core.authorizer).__name__, "IdentityHolder")

    def test_all_in_one_never_imports_grpc(self) -> None:
        """The in-process path stays free of gRPC: no import, no thread (the plain
        benchmark's guarantee)."""
        import subprocess

        path = config_file()
        code = ("import sys, threading\n"
                "from twisted.internet.testing import MemoryReactorClock\n"
                "from gateway import tree\n"
                "from gateway.config import load_snapshot\n"
                f"root = tree.build_service_tree(load_snapshot({path!r}, {{}}), {path!r}, "
                "MemoryReactorClock())\n"
                "assert 'grpc' not in sys.modules, 'grpc imported'\n"
                "assert threading.active_count() == 1, threading.enumerate()\n")
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

    def test_directory_follows_reloads(self) -> None:
        """Setting idp_service_account to an LDAP directory on reload gives the identity
        code directory groups (and the sync starts); removing it goes back to the
        groups claim. Sessions stay in the same store throughout."""
        import base64
        import json

        from gateway.databroker.directory_records import DirectoryView

        path = config_file(**IDENTITY, shared_secret=SECRET, cookie_secret=SECRET)
        reactor = MemoryReactorClock()
        root = tree.build_service_tree(load_snapshot(path, {}), path, reactor)
        root.startService()
        self.addCleanup(root.stopService)
        proxy = next(s for s in root if type(s).__name__ == "ProxyService")
        holder = proxy.core.authorizer
        store = holder.store
        self.assertIsNone(holder.identity.directory)
        account = base64.b64encode(json.dumps({
            "url": "ldap://127.0.0.1:1", "bind_dn": "cn=gw,dc=t", "password": "pw",
            "base_dn": "dc=t"}).encode()).decode()
        source = root.getServiceNamed("config")
        with open(path) as handle:
            original = handle.read()
        with open(path, "w") as handle:
            handle.write(yaml.safe_dump(base_config(**IDENTITY, shared_secret=SECRET,
                                                    cookie_secret=SECRET,
                                                    idp_service_account=account)))
        self.assertTrue(source.reload("test"))
        self.assertIsInstance(holder.identity.directory, DirectoryView)
        self.assertIsNotNone(holder.broker.sync)
        self.assertIs(holder.store, store)
        with open(path, "w") as handle:
            handle.write(original)
        self.assertTrue(source.reload("test"))
        self.assertIsNone(holder.identity.directory)
        self.assertIsNone(holder.broker.sync)

    def test_proxy_listens_on_address(self) -> None:
        """Starting the tree binds `address` through an endpoint service."""
        path = config_file(address="127.0.0.1:18443")
        reactor = MemoryReactorClock()
        root = tree.build_service_tree(load_snapshot(path, {}), path, reactor)
        root.privilegedStartService()
        root.startService()
        self.addCleanup(root.stopService)
        self.assertEqual([(port, iface) for port, _, _, iface in reactor.tcpServers],
                         [(18443, "127.0.0.1")])


class FakeThreadReactor(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple[Any, ...]]] = []

    def callFromThread(self, f: Any, *args: Any) -> None:
        self.calls.append((f, args))


class SighupTests(SynchronousTestCase):
    def test_sighup_requests_reload(self) -> None:
        """SIGHUP schedules a reload on the reactor thread; stop restores the handler."""
        path = config_file()
        reactor = FakeThreadReactor()
        source = ConfigSource(path, load_snapshot(path, {}), reactor, environ={})
        service = tree.SighupService(source, reactor)
        before = signal.getsignal(signal.SIGHUP)
        service.startService()
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            self.assertEqual(reactor.calls, [(source.reload, ("SIGHUP",))])
        finally:
            service.stopService()
        self.assertEqual(signal.getsignal(signal.SIGHUP), before)


class CliTests(SynchronousTestCase):
    def run_cli(self, *argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        self.patch(sys, "stdout", out)
        self.patch(sys, "stderr", err)
        code = cli_main(list(argv))
        return code, out.getvalue(), err.getvalue()

    def test_check_ok(self) -> None:
        """`gateway check` prints a one-line summary and exits 0."""
        path = config_file(http_redirect_addr=":80", cookie_secert="typo")
        code, out, err = self.run_cli("check", "--config", path)
        self.assertEqual(code, 0)
        self.assertEqual(out, f"ok: {path}: services=all listeners=http://:443, redirect "
                              "http://:80 routes=1 (hosts=1, public=1, tcp=0) warnings=1\n")
        self.assertIn("warning: cookie_secert: unknown setting", err)

    def test_check_problems(self) -> None:
        """`gateway check` prints every problem and exits 1."""
        code, out, err = self.run_cli("check", "--config", config_file(services="blue",
                                                                        timeout_read="x"))
        self.assertEqual(code, 1)
        self.assertEqual(out, "")
        self.assertIn("(2 problems)", err)

    def test_check_missing_file(self) -> None:
        """A missing file is one clear line."""
        code, _, err = self.run_cli("check", "--config", "/nonexistent.yaml")
        self.assertEqual((code, err), (1, "gateway check: /nonexistent.yaml: no such file\n"))

    def test_version_and_usage(self) -> None:
        """`gateway version` prints the version; no command prints help and exits 2."""
        code, out, _ = self.run_cli("version")
        self.assertEqual(code, 0)
        self.assertTrue(out.startswith("gateway 0.1.0 (Python 3."))
        self.assertEqual(self.run_cli()[0], 2)
