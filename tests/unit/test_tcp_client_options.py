"""``gateway tcp`` arguments: destinations, --listen, --gateway-url and the CA flags,
with the one-line messages and exit status 2 for anything malformed."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import tempfile
from pathlib import Path

import trustme
from twisted.trial.unittest import SynchronousTestCase

from gateway.cli import main
from gateway.cli.tcp.options import (
    Address,
    GatewayURL,
    UsageProblem,
    parse_destination,
    parse_gateway_url,
    parse_listen,
    read_ca,
)


def run_cli(*argv: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
    return code, err.getvalue()


class DestinationTests(SynchronousTestCase):
    def test_host_port(self) -> None:
        self.assertEqual(parse_destination("db.example.com:5432"),
                         Address("db.example.com", 5432))
        self.assertEqual(parse_destination("DB.Example.COM:22").authority, "db.example.com:22")
        self.assertEqual(parse_destination("10.0.0.5:6379"), Address("10.0.0.5", 6379))

    def test_ipv6_in_brackets(self) -> None:
        address = parse_destination("[::1]:22")
        self.assertEqual(address, Address("::1", 22))
        self.assertEqual(address.authority, "[::1]:22")

    def test_other_forms_are_refused(self) -> None:
        for bad in ("db.example.com", "db.example.com:", ":5432", "db:port", "db:70000",
                    "db:0", "::1:22", "[::1]22", "[db]:22", "tcp://db:5432", "db:5432/x",
                    "user@db:22", "db :22", "", "db:-1", "db:+22"):
            with self.subTest(bad=bad), self.assertRaises(UsageProblem) as caught:
                parse_destination(bad)
            self.assertEqual(str(caught.exception),
                             f"invalid destination {bad!r}: expected host:port, "
                             "e.g. db.example.com:5432")

    def test_cli_exit_2_with_one_line(self) -> None:
        code, err = run_cli("tcp", "db.example.com")
        self.assertEqual(code, 2)
        self.assertEqual(err, "gateway tcp: invalid destination 'db.example.com': expected "
                              "host:port, e.g. db.example.com:5432\n")

    def test_cli_bad_flags_exit_2(self) -> None:
        for argv, start in (
                (["--listen", "db.example.com:5"], "gateway tcp: invalid --listen"),
                (["--gateway-url", "ftp://gw"], "gateway tcp: invalid --gateway-url"),
                (["--gateway-url", "https://gw/path"], "gateway tcp: invalid --gateway-url"),
                (["--ca-cert", "bm90IGEgY2VydA=="], "gateway tcp: --ca-cert: expected"),
                (["--alternate-ca-path", "/nonexistent/ca.pem"],
                 "gateway tcp: --alternate-ca-path /nonexistent/ca.pem:")):
            with self.subTest(argv=argv):
                code, err = run_cli("tcp", *argv, "db.example.com:5432")
                self.assertEqual(code, 2)
                self.assertTrue(err.startswith(start), err)
                self.assertEqual(err.count("\n"), 1)

    def test_help_documents_every_flag_and_the_examples(self) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), self.assertRaises(SystemExit):
            main(["tcp", "--help"])
        text = out.getvalue()
        for flag in ("--listen", "--gateway-url", "--alternate-ca-path", "--ca-cert",
                     "--disable-tls-verification", "--browser-cmd", "DESTINATION"):
            self.assertIn(flag, text)
        self.assertIn("ProxyCommand='gateway tcp --listen - %h:%p'", text)
        self.assertIn("psql -h 127.0.0.1 -p", text)
        self.assertIn("redis-cli -h 127.0.0.1 -p", text)


class ListenTests(SynchronousTestCase):
    def test_forms(self) -> None:
        self.assertIsNone(parse_listen("-"))
        self.assertEqual(parse_listen("127.0.0.1:0"), Address("127.0.0.1", 0))
        self.assertEqual(parse_listen("localhost:6379"), Address("127.0.0.1", 6379))
        self.assertEqual(parse_listen("[::1]:22"), Address("::1", 22))
        for bad in ("db.example.com:5432", "6379", "127.0.0.1", "*:5"):
            with self.subTest(bad=bad), self.assertRaises(UsageProblem):
                parse_listen(bad)


class GatewayURLTests(SynchronousTestCase):
    def test_default_is_https_on_the_destination_host(self) -> None:
        gateway = parse_gateway_url(None, Address("db.example.com", 5432))
        self.assertEqual(gateway, GatewayURL("https", "db.example.com", 443))
        self.assertEqual(gateway.origin, "https://db.example.com:443")
        self.assertEqual(gateway.netloc, "db.example.com")
        self.assertTrue(gateway.tls)

    def test_ports_default_by_scheme(self) -> None:
        destination = Address("db", 1)
        self.assertEqual(parse_gateway_url("http://gw.example.com", destination),
                         GatewayURL("http", "gw.example.com", 80))
        self.assertEqual(parse_gateway_url("HTTPS://GW.example.com:8443/", destination),
                         GatewayURL("https", "gw.example.com", 8443))
        self.assertEqual(parse_gateway_url("http://[::1]:8080", destination).origin,
                         "http://[::1]:8080")
        self.assertEqual(parse_gateway_url("http://gw:8080", destination).netloc, "gw:8080")

    def test_refused(self) -> None:
        for bad in ("gw.example.com", "tcp://gw:1", "https://", "https://gw/x", "https://gw?a",
                    "https://u@gw", "https://gw:99999"):
            with self.subTest(bad=bad), self.assertRaises(UsageProblem):
                parse_gateway_url(bad, Address("db", 1))


class CATests(SynchronousTestCase):
    def setUp(self) -> None:
        self.pem = trustme.CA().cert_pem.bytes()
        handle, name = tempfile.mkstemp(suffix=".pem")
        os.close(handle)
        self.addCleanup(os.unlink, name)
        self.path = Path(name)

    def test_file_and_base64_are_combined(self) -> None:
        path = self.path
        path.write_bytes(self.pem)
        other = trustme.CA().cert_pem.bytes()
        inline = base64.b64encode(other).decode()
        both = read_ca(str(path), inline)
        assert both is not None
        self.assertIn(self.pem, both)
        self.assertIn(other, both)
        self.assertIsNone(read_ca(None, None))

    def test_base64_url_safe_and_unpadded(self) -> None:
        inline = base64.urlsafe_b64encode(self.pem).decode().rstrip("=")
        self.assertEqual(read_ca(None, inline), self.pem)

    def test_file_without_certificate(self) -> None:
        path = self.path
        path.write_text("hello\n")
        with self.assertRaises(UsageProblem) as caught:
            read_ca(str(path), None)
        self.assertIn("no PEM certificate", str(caught.exception))
