"""Fuzz target: OpenSSH KRLs (``gateway.config.ssh_krl``), the hand-written parser of
a route's ``ssh_upstream_revoked_keys_file``, and its key-list form
(``gateway.config.ssh.parse_key_list``).

Input: a KRL; one that does not start with the KRL magic gets a valid header put in
front, so that the sections are what is explored (the corpus holds KRLs that
``ssh-keygen -k`` wrote).

Contract:

- ``parse_krl`` gives a Krl or raises KrlError (nothing else);
- each CA's revoked serials are sorted, disjoint, non-adjacent ranges with
  ``0 < start <= end < 2**64``, and a serial at either end of a range is revoked and
  one just outside it is not (serial 0 never);
- ``parse_key_list`` gives blobs or raises ValueError.
"""

from __future__ import annotations

import contextlib
import struct

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway.config.ssh_krl", "gateway.config.ssh"):
    from gateway.config.ssh import parse_key_list
    from gateway.config.ssh_krl import MAGIC, KrlError, parse_krl

HEADER = MAGIC + struct.pack(">IQQQII", 1, 1, 0, 0, 0, 0)
U64 = (1 << 64) - 1


def TestOneInput(data: bytes) -> None:
    krl_bytes = data if data.startswith(MAGIC) else HEADER + data
    try:
        krl = parse_krl(krl_bytes)
    except KrlError:
        pass
    else:
        for _, section in krl.certificates:
            ranges = list(zip(section.starts, section.ends, strict=True))
            for index, (low, high) in enumerate(ranges):
                following = ranges[index + 1][0] if index + 1 < len(ranges) else U64 + 2
                assert 0 < low <= high <= U64 and high + 1 < following, describe(data)
                # ("\0": a key id no KRL can hold)
                assert section.revoked(low, "\0") and section.revoked(high, "\0"), \
                    describe(data)
                assert not section.revoked(low - 1, "\0"), describe(data)
                assert high == U64 or not section.revoked(high + 1, "\0"), describe(data)
            assert not section.revoked(0, "\0"), describe(data)
        krl.key_revoked(data)
    with contextlib.suppress(ValueError):
        parse_key_list(data.decode("latin-1"))


if __name__ == "__main__":
    fuzz(TestOneInput)
