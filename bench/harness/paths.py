"""Where the benchmark lives: results go under ``bench/``, the gateway runs from the
repository root."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = BENCH_DIR.parent


def import_peers() -> Any:
    """``tests.support.peers`` and ``.browser`` from the repository (stdlib only)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import tests.support.browser as browser
    import tests.support.peers as peers
    return peers, browser
