"""``gateway tcp`` arguments: the flags, their help, and the checked values they become.

Everything a person can get wrong on the command line is found here, before the reactor
starts, and reported as one line naming the expected form (exit 2, like argparse's own
usage errors).
"""

from __future__ import annotations

import argparse
import base64
import binascii
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.tls.client import is_ip_literal

EPILOG = """\
examples:
  ssh through the gateway (one tunnel on stdin/stdout, started by ssh itself):
    ssh -o ProxyCommand='gateway tcp --listen - %h:%p' admin@ssh.example.com

  psql: start a local listener, then point psql at the address it prints:
    gateway tcp db.example.com:5432
      (prints: gateway tcp: listening on 127.0.0.1:40123 for db.example.com:5432)
    psql -h 127.0.0.1 -p 40123 -U app appdb

  redis-cli on a fixed local port:
    gateway tcp --listen 127.0.0.1:6379 redis.example.com:6379
    redis-cli -h 127.0.0.1 -p 6379 PING

  --gateway-url is needed when the destination's name does not lead to the gateway
  (e.g. --gateway-url https://gateway.example.com, or http://localhost:8080 for a local
  trial): one gateway name reaches every TCP route.

The first connection opens the sign-in page (the URL is printed too, for machines without a
browser); the token is cached per gateway and destination under
$XDG_CACHE_HOME/gateway/ (default ~/.cache/gateway/), so later connections need no sign-in.
"""


class UsageProblem(ValueError):
    """A flag or the destination has the wrong form; the message says what is expected."""


@dataclass(frozen=True, slots=True)
class Address:
    """A host and port, as typed (``db.example.com:5432``, ``[::1]:22``)."""

    host: str
    port: int

    @property
    def authority(self) -> str:
        """``host:port`` as it goes on the wire (IPv6 literals in brackets)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def __str__(self) -> str:
        return self.authority


@dataclass(frozen=True, slots=True)
class GatewayURL:
    """Where the gateway listens: ``http`` or ``https``, host, port."""

    scheme: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def origin(self) -> str:
        """``https://host:port`` (the port always shown: it keys the token cache)."""
        return f"{self.scheme}://{Address(self.host, self.port).authority}"

    @property
    def netloc(self) -> str:
        """The Host header value: the port only when it is not the scheme's default."""
        address = Address(self.host, self.port)
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else address.authority


@dataclass(frozen=True, slots=True)
class TunnelOptions:
    destination: Address
    gateway: GatewayURL
    listen: Address | None  # None: stdin/stdout
    ca_pem: bytes | None
    verify_tls: bool
    browser_cmd: str | None


def parse_port(text: str) -> int | None:
    if not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 0 <= port <= 65535 else None


def split_host_port(text: str) -> Address | None:
    """``host:port`` or ``[v6]:port``; None for anything else."""
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":") or not is_ip_literal(host):
            return None
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep or ":" in host:
            return None
    port = parse_port(port_text)
    if not host or port is None or any(c.isspace() or c in "/?#@" for c in host):
        return None
    return Address(host.lower(), port)


def parse_destination(text: str) -> Address:
    address = split_host_port(text)
    if address is None or address.port == 0:
        raise UsageProblem(f"invalid destination {text!r}: expected host:port, "
                           "e.g. db.example.com:5432")
    return address


def parse_listen(text: str) -> Address | None:
    """``-`` (None: stdin/stdout) or an IP address and port (``localhost``: 127.0.0.1)."""
    if text == "-":
        return None
    address = split_host_port(text)
    if address is not None and address.host == "localhost":
        address = Address("127.0.0.1", address.port)
    if address is None or not is_ip_literal(address.host):
        raise UsageProblem(f"invalid --listen {text!r}: expected ip:port "
                           "(e.g. 127.0.0.1:0 for any free port) or - for stdin/stdout")
    return address


def parse_gateway_url(text: str | None, destination: Address) -> GatewayURL:
    """``--gateway-url``; by default ``https://<destination host>:443``."""
    if text is None:
        return GatewayURL("https", destination.host, 443)
    problem = UsageProblem(f"invalid --gateway-url {text!r}: expected http(s)://host[:port], "
                           "e.g. https://gateway.example.com")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise problem from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname or \
            parts.path not in ("", "/") or parts.query or parts.fragment or parts.username:
        raise problem
    scheme = parts.scheme.lower()
    return GatewayURL(scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80))


def read_ca(path: str | None, inline: str | None) -> bytes | None:
    """The PEM of ``--alternate-ca-path`` and/or ``--ca-cert`` (base64 of the PEM text)."""
    pems: list[bytes] = []
    if path is not None:
        try:
            with open(path, "rb") as fh:
                pems.append(fh.read())
        except OSError as exc:
            raise UsageProblem(f"--alternate-ca-path {path}: {exc.strerror or exc}") from None
        if b"-----BEGIN CERTIFICATE-----" not in pems[-1]:
            raise UsageProblem(f"--alternate-ca-path {path}: no PEM certificate in the file")
    if inline is not None:
        text = inline.strip().replace("-", "+").replace("_", "/")  # URL-safe too
        try:
            decoded = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            decoded = b""
        if b"-----BEGIN CERTIFICATE-----" not in decoded:
            raise UsageProblem("--ca-cert: expected the base64 of a PEM certificate, e.g. "
                               "--ca-cert \"$(base64 -w0 ca.pem)\"")
        pems.append(decoded)
    return b"\n".join(pems) if pems else None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "destination", metavar="DESTINATION",
        help="the TCP service as host:port, exactly as its route's from: "
        "tcp+https://host:port names it")
    parser.add_argument(
        "--listen", metavar="ADDR", default="127.0.0.1:0",
        help="local address to accept connections on, each one its own tunnel "
        "(default 127.0.0.1:0: a free port, printed on stderr); - uses stdin/stdout "
        "for a single tunnel, as ssh's ProxyCommand needs")
    parser.add_argument(
        "--gateway-url", metavar="URL",
        help="the gateway's address, http(s)://host[:port] "
        "(default https://<destination host>:443)")
    parser.add_argument(
        "--alternate-ca-path", metavar="FILE",
        help="trust the CA certificate(s) in this PEM file, instead of the system's, "
        "to verify the gateway's TLS certificate")
    parser.add_argument(
        "--ca-cert", metavar="BASE64",
        help="as --alternate-ca-path, with the PEM text given base64-encoded "
        "(e.g. \"$(base64 -w0 ca.pem)\")")
    parser.add_argument(
        "--disable-tls-verification", action="store_true",
        help="do not verify the gateway's TLS certificate (insecure: for tests only)")
    parser.add_argument(
        "--browser-cmd", metavar="CMD",
        help="command that opens the sign-in URL (given as its last argument), e.g. "
        "'firefox --new-window'; default: the system's web browser (Python's webbrowser). "
        "The URL is always printed as well")


def tunnel_options(args: argparse.Namespace) -> TunnelOptions:
    """The checked values of parsed arguments; ``UsageProblem`` for the first bad one."""
    destination = parse_destination(args.destination)
    return TunnelOptions(
        destination=destination,
        gateway=parse_gateway_url(args.gateway_url, destination),
        listen=parse_listen(args.listen),
        ca_pem=read_ca(args.alternate_ca_path, args.ca_cert),
        verify_tls=not args.disable_tls_verification,
        browser_cmd=args.browser_cmd or None,
    )
