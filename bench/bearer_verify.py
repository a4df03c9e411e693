"""CPU per bearer token, in process: ``verify`` cold (parse, header rules, signature,
claims, flattening) for each key type, and a provider's ``Verifier`` on a token it has
seen (hash and dict lookup), which is what a caller repeating its token costs.

    .venv/bin/python bench/bearer_verify.py [--tokens N] [--rounds R]

Prints the fastest round's microseconds per token (the machine is shared: the fastest
of several rounds is the least disturbed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.bearer_jwt.expect import BearerExpectations
from gateway.bearer_jwt.keys import key_set_from_json
from gateway.bearer_jwt.verifier import Verifier
from gateway.bearer_jwt.verify import Verified, verify
from tests.support.bearer_tokens import (
    AUDIENCE,
    ISSUER,
    NOW,
    ec_key,
    ed_key,
    jwks,
    mint,
    rsa_key,
)

SIGNERS: list[tuple[str, Any, str, str]] = [
    ("RS256 (RSA 2048)", rsa_key(), "rsa", "RS256"),
    ("PS256 (RSA 2048)", rsa_key(), "rsa", "PS256"),
    ("ES256 (P-256)", ec_key(), "ec", "ES256"),
    ("EdDSA (Ed25519)", ed_key(), "ed", "EdDSA"),
]


class Fixed:
    def __init__(self, keys: Any) -> None:
        self.keys = keys

    def unknown_kid(self) -> None:
        raise AssertionError("no unknown kid in the benchmark")


def best(rounds: int, run: Any) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    keys = key_set_from_json("ci", jwks((rsa_key(), "rsa"), (ec_key(), "ec"),
                                        (ed_key(), "ed")))
    expect = BearerExpectations("ci", ISSUER, (AUDIENCE,))
    claims = {"repository": "example/app", "groups": ["a", "b", "c"],
              "kubernetes.io": {"namespace": "prod", "pod": {"name": "p"}}}
    n = args.tokens
    for label, private, kid, alg in SIGNERS:
        token = mint(private, kid, alg, **claims)
        assert isinstance(verify(token, keys, expect, NOW), Verified)

        def cold(token: str = token) -> None:
            for _ in range(n):
                verify(token, keys, expect, NOW)

        seconds = best(args.rounds, cold)
        print(f"verify cold {label:18} {seconds / n * 1e6:8.1f} µs/token "
              f"({len(token)} bytes)")
    tokens = [mint(rsa_key(), "rsa", "RS256", jti=f"j{i}", **claims) for i in range(100)]
    verifier = Verifier(expect, Fixed(keys), lambda: NOW)
    for token in tokens:
        assert isinstance(verifier.check(token), Verified)

    def cached() -> None:
        for _ in range(n // 100):
            for token in tokens:
                verifier.check(token)

    seconds = best(args.rounds, cached)
    print(f"verifier cached (100 live tokens)   {seconds / (n // 100 * 100) * 1e6:8.2f} "
          f"µs/token")


if __name__ == "__main__":
    main()
