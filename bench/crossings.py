"""Module crossings per request of ``inproc.py``'s loops: calls from one gateway module
into another, read off cProfile's call graph (deterministic, unlike CPU time), for
``docs/ARCHITECTURE.md``'s count of a request's hops. Run it in each tree to compare.

    .venv/bin/python bench/crossings.py [--protocol h1|h2|auth|all] [--pairs]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this tree's gateway

from bench.inproc import http1_loop, http2_loop

GATEWAY = str(Path(__file__).resolve().parent.parent / "gateway") + "/"
REQUESTS = 1000


def module(filename: str) -> str | None:
    return filename[len(GATEWAY):] if filename.startswith(GATEWAY) else None


def crossings(signed_in: bool, http2: bool) -> Counter[tuple[str, str]]:
    """(caller's module, callee's module) -> calls per request."""
    prepare = http2_loop() if http2 else http1_loop(signed_in=signed_in)
    prepare(200)()  # warm the pool and the caches
    run = prepare(REQUESTS)
    profile = cProfile.Profile()
    profile.enable()
    run()
    profile.disable()
    pairs: Counter[tuple[str, str]] = Counter()
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]] = \
        pstats.Stats(profile).stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, _, _, _, callers) in stats.items():
        callee = module(filename)
        if callee is None:
            continue
        for (caller_file, _, _), counts in callers.items():
            caller = module(caller_file)
            if caller is not None and caller != callee:
                pairs[(caller, callee)] += counts[0] / REQUESTS
    return pairs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=("h1", "h2", "auth", "all"), default="all")
    parser.add_argument("--pairs", action="store_true", help="list the module pairs")
    args = parser.parse_args(argv)
    names = ["h1", "h2", "auth"] if args.protocol == "all" else [args.protocol]
    for name in names:
        pairs = crossings(signed_in=name == "auth", http2=name == "h2")
        print(f"{name}: {sum(pairs.values()):.1f} crossings per request, "
              f"{len(pairs)} module pairs")
        if args.pairs:
            for (caller, callee), count in sorted(pairs.items()):
                print(f"  {count:5.1f}  {caller} -> {callee}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
