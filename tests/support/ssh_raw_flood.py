"""A client that does what OpenSSH's ``ssh`` never does: it proves a key of its own
(publickey with a signature), and when the gateway answers "partial success,
keyboard-interactive" it asks keyboard-interactive, and on every sign-in link it is
shown asks again instead of answering (issue 39, part 1: each ask used to make a new
sign-in ticket). ``flood`` returns what it saw: the asks sent, the links shown (and how
many distinct), the disconnect the gateway sent, and the seconds it took.

It is ``ssh_raw``'s client on a blocking socket (no reactor), bounded by ``asks`` and
``seconds``.
"""

from __future__ import annotations

import time
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ed25519
from twisted.conch.ssh import keys
from twisted.conch.ssh.common import NS, getNS

from tests.support import ssh_raw as raw


def flood(port: int, user: str = "alice@db", asks: int = 2000,
          seconds: float = 10.0) -> dict[str, Any]:
    started = time.monotonic()
    result: dict[str, Any] = {"asks": 0, "links": 0, "distinct_links": 0, "failures": 0,
                              "authenticated": False, "disconnect": None, "stopped": ""}
    links: set[bytes] = set()
    name = user.encode()
    key = keys.Key(ed25519.Ed25519PrivateKey.generate())  # made up on the spot
    client = raw.RawSSH(port, timeout=10)
    try:
        client.send(raw.SERVICE_REQUEST, NS(b"ssh-userauth"))
        client.send(raw.USERAUTH_REQUEST, raw.publickey(name, key, client.client.session_id))
        while True:
            packet = client.answer(raw.USERAUTH_FAILURE, raw.USERAUTH_SUCCESS,
                                   raw.USERAUTH_INFO_REQUEST)
            if packet is None:  # the gateway closed the connection
                break
            kind, payload = packet
            if kind == raw.USERAUTH_SUCCESS:
                result["authenticated"] = True
                break
            if kind == raw.USERAUTH_FAILURE:
                result["failures"] += 1
                methods, rest = getNS(payload)
                if b"keyboard-interactive" not in methods.split(b",") or rest[:1] != b"\x01":
                    break
            else:
                _name, instruction, _rest = getNS(payload, 2)
                result["links"] += 1
                links.add(instruction)
                result["distinct_links"] = len(links)
            if result["asks"] >= asks or time.monotonic() - started >= seconds:
                result["stopped"] = "bound"
                break
            result["asks"] += 1
            client.send(raw.USERAUTH_REQUEST, raw.keyboard_interactive(name))
    finally:
        client.close()
    if client.client.disconnect is not None:
        code, text = client.client.disconnect
        result["disconnect"] = [code, text.decode("utf-8", "replace")]
    result["seconds"] = round(time.monotonic() - started, 3)
    return result
