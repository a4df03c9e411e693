"""Fuzz target: the redirect-target checks of ``gateway.authenticate.targets``:
``safe_target`` (sign-in return targets, sign-out ``gateway_redirect_uri``) and
``allowed_programmatic_target`` (programmatic login's ``gateway_redirect_uri`` against
``programmatic_redirect_domain_whitelist``).

Input: a URI, as text (UTF-8) and as it arrives in a query string (percent-decoded).

Contract: a URI accepted by either check is one a browser sends to an allowed host:
``http``/``https`` with ``//``, no control character, space, DEL or backslash anywhere,
no userinfo, and an authority (everything up to the first ``/``, ``?`` or ``#``, as
browsers and ``urlsplit`` cut it) whose host is an allowed one (for the whitelist: an
entry, or a loopback address when it names ``localhost``), with at most a numeric port.
Neither check raises.
"""

from __future__ import annotations

import ipaddress
import re

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway"):
    from gateway.authenticate.targets import (
        allowed_programmatic_target,
        query_params,
        safe_target,
    )
    from gateway.authorize.hook import RequestInfo

ALLOWED_HOSTS = {"app.test", "auth.test", "auth.test:8443"}
DOMAINS = ("localhost", "cli.test")
_START = re.compile(r"(?i)https?://")
_PORT = re.compile(r"[0-9]*")


def authority_of(uri: str) -> str | None:
    """The authority a browser reads, or None when the URI is not safe in itself."""
    if not _START.match(uri):
        return None
    if any(ord(c) < 0x21 or ord(c) == 0x7F or c == "\\" for c in uri):
        return None
    rest = uri[uri.index("//") + 2:]
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority or not authority:
        return None
    return authority.lower()


def host_and_port(authority: str) -> tuple[str, str]:
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        return host, rest[1:] if rest.startswith(":") else rest
    host, _, port = authority.partition(":")
    return host, port


def check(uri: str) -> None:
    if safe_target(uri, ALLOWED_HOSTS):
        authority = authority_of(uri)
        assert authority is not None, describe(uri)
        host, port = host_and_port(authority)
        assert authority in ALLOWED_HOSTS or (host in ALLOWED_HOSTS and _PORT.fullmatch(port)), \
            describe(uri)
    if allowed_programmatic_target(uri, DOMAINS):
        authority = authority_of(uri)
        assert authority is not None, describe(uri)
        host, port = host_and_port(authority)
        assert _PORT.fullmatch(port), describe(uri)
        if host not in DOMAINS and host != "localhost":
            assert ipaddress.ip_address(host).is_loopback, describe(uri)


def TestOneInput(data: bytes) -> None:
    check(data.decode("utf-8", "replace"))
    request = RequestInfo(b"GET", "https", "app.test", "/.gateway/api/v1/login",
                          b"?gateway_redirect_uri=" + data, [], "192.0.2.1")
    check(query_params(request).get("gateway_redirect_uri", ""))


if __name__ == "__main__":
    fuzz(TestOneInput)
