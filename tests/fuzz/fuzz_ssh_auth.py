"""Fuzz target: the SSH server's authentication (``gateway.ssh.auth.GatewayUserAuth``)
with the user-name parser under it (``gateway.ssh.user_names``) and the host key lines of
routes (``gateway.config.known_hosts.parse_host_key_line``).

Input: a sequence of packets, each a selector byte and a length-prefixed body. The
selector's low bit picks the message (USERAUTH_REQUEST or INFO_RESPONSE); its second bit
wraps the body as a well-formed request (user name, ``ssh-connection``, a method chosen
by the next byte, the rest as the method's data), so both malformed framing and
plausible requests are reached. The whole input is also parsed as a user name, as a
host key line, as a host CA line (``parse_host_ca_line``, ``hosts_match``), as an
``@revoked`` line (``parse_revoked_line``) and as a
server's host certificate (``gateway.ssh.host_cert``; the corpus holds real ones).

Contract:

- nothing raises out of the service; nothing is sent after a disconnect;
- no USERAUTH_SUCCESS, and the gate is never asked to admit anyone: nobody without a
  valid signature from the key they name gets past publickey;
- the number of failures answered never exceeds the attempt limit before a disconnect;
- ``parse_user`` gives a LoginTarget of a valid route name or raises ``BadUserName``;
  ``parse_host_key_line`` gives a key of the type it names or raises ValueError;
  ``parse_host_ca_line`` gives a CA of a CA key type, None or ValueError;
  ``parse_revoked_line`` gives a key blob, None or ValueError;
- ``check_host_certificate`` raises only CertificateRefused, and a certificate it
  accepts names the host and is valid at the time asked.
"""

from __future__ import annotations

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway.ssh", "gateway.config.known_hosts"):
    from twisted.conch.ssh.common import NS

    from gateway.config.known_hosts import (
        CA_KEY_TYPES,
        HOST_KEY_TYPES,
        hosts_match,
        parse_host_ca_line,
        parse_host_key_line,
        parse_revoked_line,
    )
    from gateway.ssh import limits
    from gateway.ssh.auth import GatewayUserAuth
    from gateway.ssh.host_cert import (
        CERTIFICATE_ALGORITHMS,
        NOT_YET_VALID_SKEW,
        CertificateRefused,
        check_host_certificate,
    )
    from gateway.ssh.user_names import _ROUTE, BadUserName, parse_user
    from tests.support.ssh_fakes import FakeGate, FakeSSH

METHODS = (b"publickey", b"keyboard-interactive", b"none", b"password", b"hostbased")
HOST, NOW = "db.example.test", 1_800_000_000
# a certificate blob's type -> the algorithm that negotiates it (the first for RSA)
BY_BLOB_TYPE = {blob_type: alg for alg, (blob_type, _) in
                reversed(CERTIFICATE_ALGORITHMS.items())}


def packets(data: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    position = 0
    while position + 2 <= len(data) and len(out) < 64:
        selector, size = data[position], data[position + 1]
        body = data[position + 2:position + 2 + size]
        position += 2 + size
        kind = 50 if selector & 1 else 61
        if selector & 2 and body:
            user, _, rest = body[1:].partition(b"\x00")
            method = METHODS[body[0] % len(METHODS)]
            if method == b"publickey" and rest:
                rest = rest[:1] + NS(b"ssh-ed25519") + NS(rest[1:])
            body = NS(user) + NS(b"ssh-connection") + NS(method) + rest
        out.append((kind, body))
    return out


def TestOneInput(data: bytes) -> None:
    ssh = FakeSSH()
    gate = FakeGate(bound="session", confirmed="session")
    auth = GatewayUserAuth(ssh, gate)  # type: ignore[arg-type]
    for kind, body in packets(data):
        if ssh.disconnected is not None:
            break  # a real transport stops reading once it is closing
        auth.packetReceived(kind, body)
    assert 52 not in ssh.kinds(), describe(data)
    assert gate.admitted == [], describe(data)
    assert ssh.kinds().count(51) <= limits.AUTH_ATTEMPTS, describe(data)
    try:
        target = parse_user(data)
    except BadUserName:
        pass
    else:
        assert _ROUTE.fullmatch(target.route), describe(data)
    try:
        key = parse_host_key_line(data.decode("latin-1"))
    except ValueError:
        pass
    else:
        assert key.type in HOST_KEY_TYPES, describe(data)
    host_certificate(data)
    text = data.decode("latin-1")
    assert hosts_match(text, HOST, 2200) in (True, False), describe(data)
    try:
        authority = parse_host_ca_line(text, HOST, 22)
    except ValueError:
        pass
    else:
        assert authority is None or (authority.authority and
                                     authority.type in CA_KEY_TYPES), describe(data)
    try:
        revoked = parse_revoked_line(text, HOST, 22)
    except ValueError:
        pass
    else:
        assert revoked is None or revoked[4:4 + 3] in (b"ssh", b"ecd"), describe(data)


def host_certificate(data: bytes) -> None:
    size = int.from_bytes(data[:4], "big") if len(data) >= 4 else 0
    algorithm = BY_BLOB_TYPE.get(data[4:4 + size], b"ssh-ed25519-cert-v01@openssh.com")
    try:
        cert = check_host_certificate(data, algorithm, HOST, NOW)
    except CertificateRefused:
        return
    assert HOST in cert.principals, describe(data)
    assert cert.valid_after - NOT_YET_VALID_SKEW <= NOW < cert.valid_before, describe(data)


if __name__ == "__main__":
    fuzz(TestOneInput)
