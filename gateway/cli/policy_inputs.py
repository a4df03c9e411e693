"""What ``gateway policy check`` is asked about: its arguments, and what they say: the
request (a URL read as the data plane reads a request's target), the instant, the person
(a session built as sign-in builds one) and a client certificate.

Pure parsing, no decision: every problem is an ``InputError`` whose message names the
argument, and the command exits 2 with it. Light to import: ``gateway``'s parser needs
``add_arguments`` for every command it runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from gateway.authorize.claims import session_from_claims
from gateway.sessions.model import Session
from gateway.wire.normalize import BadTarget, connect_authority, normalise_target

# The user id of someone given only by --email (a provider always sends one; ``facts_of``
# sees nobody signed in without it). Shown as it is, so nobody mistakes it for a real id.
NO_USER_ID = "(no --user)"
# Claims that have arguments of their own.
_OWN_FLAGS = {"sub": "--user", "email": "--email", "groups": "--groups"}

_HTTP = re.compile(r"(https?)://([^/?#]*)(.*)", re.IGNORECASE | re.DOTALL)
_TCP = re.compile(r"tcp\+https://([^/?#]*)(.*)", re.IGNORECASE | re.DOTALL)
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_HOST_PORT = re.compile(
    rf"(\[[0-9a-f:.]+\]|{_LABEL}(?:\.{_LABEL})*\.?)(?::([0-9]{{1,5}}))?", re.IGNORECASE)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")  # RFC 9110's method token
_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})")

EPILOG = """\
examples:
  gateway policy check -c /etc/gateway/config.yaml --url https://wiki.example.com/admin/ \\
      --email bob@example.com --groups engineering --method DELETE --ip 203.0.113.7
  gateway policy check -c config.yaml --url tcp+https://db.example.com:5432 --user alice-id
  gateway policy check -c config.yaml --url https://wiki.example.com/ --json \\
      --at 2024-05-06T23:30:00+02:00 --claim org.unit=research --client-cert me.pem
  gateway policy check -c config.yaml --url https://mcp-tickets.example.com/ \\
      --email bob@example.com --groups support --mcp-tool search_tickets

Without --user or --email nobody is signed in. Exit status: 0 allowed (or a public route:
no decision), 1 denied, 2 no route, a bad configuration or a bad argument."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", metavar="FILE", required=True,
                        help="configuration file")
    parser.add_argument("--url", required=True,
                        help="the URL asked for: http(s)://host[:port]/path or "
                             "tcp+https://host:port")
    parser.add_argument("--user", metavar="ID", help="the user's id (the provider's sub)")
    parser.add_argument("--email", metavar="E",
                        help="the user's e-mail, used only if decisions may use it")
    parser.add_argument("--groups", metavar="A,B", help="the user's groups, comma-separated")
    parser.add_argument("--provider", metavar="ID",
                        help="the identity provider: the one --user/--email signed in "
                             "through (default: the first interactive one), or with "
                             "--token the one the token is checked against")
    parser.add_argument("--claim", metavar="K=V", action="append", default=[],
                        help="a claim of the provider (repeat; dotted names nest)")
    parser.add_argument("--method", metavar="M", help="the HTTP method (default GET)")
    parser.add_argument("--ip", metavar="A", default="",
                        help="the client address as the gateway determines it")
    parser.add_argument("--at", metavar="RFC3339",
                        help="the instant of the request (default: now)")
    parser.add_argument("--client-cert", metavar="PEM",
                        help="the client certificate (PEM file, chain after it)")
    parser.add_argument("--mcp-method", metavar="M",
                        help="an MCP route: the JSON-RPC method of the message asked "
                             "about (default tools/call with --mcp-name; the HTTP method "
                             "is then POST)")
    parser.add_argument("--mcp-name", "--mcp-tool", metavar="N", dest="mcp_name",
                        help="an MCP route: the tool a tools/call names (a prompt's "
                             "name, a resource's URI for those methods)")
    parser.add_argument("--json", action="store_true", help="one JSON object")


class InputError(ValueError):
    """An argument that cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ProbeRequest:
    """The request as the data plane would see it: ``host`` as its Host header (lower
    case) or a CONNECT's ``host:port``; ``path`` normalised (``""`` for CONNECT)."""

    url: str
    scheme: str  # "http", "https" or "tcp+https"
    method: bytes
    host: str
    path: str
    query: bytes

    @property
    def tcp(self) -> bool:
        return self.scheme == "tcp+https"


def parse_target(url: str, method: str | None, reject_parameters: bool = False) -> ProbeRequest:
    """``--url`` and ``--method``: an http(s) URL (method GET unless given) or a
    ``tcp+https://host:port`` URL (always CONNECT, path empty)."""
    tcp = _TCP.fullmatch(url)
    if tcp is not None:
        if method is not None and method.upper() != "CONNECT":
            raise InputError(f"--method {method}: a tcp+https URL is reached with CONNECT "
                             "only; leave --method out")
        if tcp.group(2) not in ("", "/"):
            raise InputError(f"--url {url}: a tcp+https URL names host:port only, no path")
        try:
            authority = connect_authority(tcp.group(1).encode("latin-1"))
        except (BadTarget, UnicodeEncodeError):
            raise InputError(f"--url {url}: write tcp+https://HOST:PORT, as the route's "
                             "from: names it") from None
        return ProbeRequest(url, "tcp+https", b"CONNECT", authority, "", b"")
    match = _HTTP.fullmatch(url)
    if match is None:
        raise InputError(f"--url {url}: expected an http://, https:// or tcp+https:// URL")
    verb = "GET" if method is None else method
    if _TOKEN.fullmatch(verb) is None:
        raise InputError(f"--method {verb}: not an HTTP method")
    if verb.upper() == "CONNECT":
        raise InputError("--method CONNECT is for TCP routes: give their tcp+https://HOST:PORT"
                         " URL (without --method)")
    scheme, authority, rest = match.group(1).lower(), match.group(2), match.group(3)
    address = _HOST_PORT.fullmatch(authority)
    if address is None or (address.group(2) is not None
                           and not 0 < int(address.group(2)) < 65536):
        raise InputError(f"--url {url}: no valid host[:port] (user information, spaces or "
                         "not a host name)")
    if not rest or rest.startswith(("?", "#")):
        rest = "/" + rest
    try:
        # the path routes and policy see: without ";" parameters, as the data plane's
        path, _, query = normalise_target(rest.encode("latin-1"), reject_parameters)
    except UnicodeEncodeError:
        raise InputError(f"--url {url}: percent-encode characters beyond Latin-1, as a "
                         "client sends them") from None
    except BadTarget as exc:
        raise InputError(f"--url {url}: the gateway refuses this request target with 400: "
                         f"{exc}") from None
    return ProbeRequest(url, scheme, verb.encode("latin-1"), authority.lower(),
                  path.decode("latin-1"), query)


def parse_instant(text: str) -> float:
    """``--at``: an RFC 3339 instant (with its offset) as epoch seconds."""
    match = _RFC3339.fullmatch(text.strip())
    if match is None:
        raise InputError(f"--at {text}: expected an RFC 3339 instant with its offset, such "
                         "as 2024-05-06T09:30:00Z or 2024-05-06T11:30:00+02:00")
    day, clock, fraction, offset = match.groups()
    zone = "+00:00" if offset in ("Z", "z") else offset
    try:
        moment = dt.datetime.fromisoformat(f"{day}T{clock}{zone}")
    except ValueError as exc:
        raise InputError(f"--at {text}: {exc}") from None
    return moment.timestamp() + (float(fraction) if fraction else 0.0)


def parse_groups(text: str | None) -> list[str] | None:
    """``--groups a,b``: the names, blanks dropped; ``None`` when not given."""
    if text is None:
        return None
    return [name.strip() for name in text.split(",") if name.strip()]


def parse_claims(pairs: Sequence[str]) -> dict[str, Any]:
    """``--claim k=v`` (repeated): the claims as a provider sends them, a dotted name
    nested (``org.unit=x`` is ``{"org": {"unit": ["x"]}}``, which ``flatten_claims``
    makes ``org.unit`` again, as for ``allowed_idp_claims``); a name given again adds a
    value to its list."""
    claims: dict[str, Any] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        name = name.strip()
        parts = name.split(".")
        if not eq or not name or not all(parts):
            raise InputError(f"--claim {pair}: write NAME=VALUE (a nested name with dots: "
                             "org.unit=VALUE)")
        if parts[0] in _OWN_FLAGS:
            raise InputError(f"--claim {pair}: give the {parts[0]} claim with "
                             f"{_OWN_FLAGS[parts[0]]}")
        node = claims
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InputError(f"--claim {pair}: {'.'.join(parts[:i + 1])} is a value, "
                                 "not a map of claims")
            node = child
        values = node.setdefault(parts[-1], [])
        if not isinstance(values, list):
            raise InputError(f"--claim {pair}: {name} is a map of claims, not a value")
        values.append(value)
    return claims


def build_session(user: str | None, email: str | None, groups: list[str] | None,
                  claims: dict[str, Any], now: float, lifetime: float) -> Session | None:
    """The session sign-in would make for these claims (``Identity.build_session``'s
    fields), or ``None`` without --user and --email: nobody signed in."""
    if not user and not email:
        return None
    raw: dict[str, Any] = {**claims, "sub": user or NO_USER_ID}
    if email:
        raw["email"] = email
    if groups is not None:
        raw["groups"] = groups
    return session_from_claims(raw, "policy-check", now, lifetime)


def read_chain(path: str) -> list[x509.Certificate]:
    """``--client-cert``: the PEM certificates of a file, the client's own first."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise InputError(f"--client-cert {path}: {exc.strerror or exc}") from None
    try:
        chain = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise InputError(f"--client-cert {path}: no PEM certificate in it") from None
    return chain


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(Encoding.DER)
