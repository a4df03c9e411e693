"""What a person reads when a tunnel cannot be opened: one message per cause, each
saying what to do about it. Messages are built from values only (no I/O), so every one
of them is unit tested."""

from __future__ import annotations

from gateway.cli.tcp.options import Address, GatewayURL


class TunnelError(Exception):
    """A tunnel could not be opened; ``str()`` is the message for the person."""


CA_HINT = ("if the gateway uses a private CA, pass its certificate with "
           "--alternate-ca-path FILE or --ca-cert BASE64 (--disable-tls-verification "
           "turns the check off: insecure, for tests only)")


def needs_sign_in(status: int) -> bool:
    """401, or a redirect to a sign-in page: the programmatic sign-in is the answer."""
    return status == 401 or 300 <= status < 400


def refused(status: int, detail: str, destination: Address, gateway: GatewayURL,
            cache_file: str | None = None) -> str:
    """The message for an error answer to CONNECT (``detail``: the gateway's reason,
    quoted unless the message already says the same)."""
    text = _refused(status, destination, gateway, cache_file)
    if status == 403 and not detail:
        detail = "you are signed in, but the route's policy does not allow you"
    said = f" (the gateway says: {detail})" if detail and detail.lower() not in text.lower() \
        else ""
    return text.replace("{said}", said)


def _refused(status: int, destination: Address, gateway: GatewayURL,
             cache_file: str | None) -> str:
    where = f"{destination} through {gateway.origin}"
    if status == 403:
        again = (f"; to sign in as someone else, delete {cache_file} and run again"
                 if cache_file else "")
        return (f"access denied to {where}{{said}}. Ask the gateway's administrator for "
                f"access{again}")
    if status == 404:
        return (f"no TCP route for {destination} at {gateway.origin}{{said}}: check the "
                f"destination (a route's from: must be tcp+https://{destination} exactly) "
                "and --gateway-url")
    if status == 405:
        return (f"{destination} is not a TCP route at {gateway.origin}{{said}}: it serves "
                "HTTP; open it in a browser instead")
    if status in (495, 496):
        return f"the gateway wants a valid client certificate for {destination}{{said}}"
    if status == 503:
        return (f"the TCP service behind {where} is down or unreachable{{said}}; "
                "try again later or tell the service's owner")
    if status == 504:
        return (f"the TCP service behind {where} did not accept the connection in "
                "time{said}; try again later or tell the service's owner")
    if status == 400:
        return f"the gateway at {gateway.origin} refused the tunnel request as malformed{{said}}"
    if status == 421:
        return (f"the gateway at {gateway.origin} cannot serve {destination} on this "
                "connection{said}: check --gateway-url")
    if needs_sign_in(status):
        return (f"the gateway still asks to sign in for {where}, right after a sign-in"
                "{said}; the sign-in did not give a usable token, try again")
    return f"unexpected answer {status} from the gateway at {gateway.origin}{{said}}"


def unreachable(gateway: GatewayURL, why: str) -> str:
    return (f"cannot reach the gateway at {gateway.origin}: {why}; "
            "check --gateway-url and your network")


def tls_failed(gateway: GatewayURL, why: str) -> str:
    return f"TLS verification of the gateway {gateway.origin} failed ({why}); {CA_HINT}"


def tls_broken(gateway: GatewayURL, why: str) -> str:
    """The TLS handshake failed for another reason than the certificate."""
    hint = (f"; is it an http:// listener? then use --gateway-url "
            f"http://{gateway.netloc}" if "wrong version number" in why or
            "packet length too long" in why else "")
    return f"TLS with the gateway at {gateway.origin} failed ({why}){hint}"


def not_a_gateway(gateway: GatewayURL, why: str) -> str:
    hint = (f"; is it an https:// listener? then use --gateway-url "
            f"https://{gateway.netloc}" if not gateway.tls else "")
    return f"the server at {gateway.origin} did not answer like a gateway ({why}){hint}"
