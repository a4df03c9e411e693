"""Where the benchmark lives: results go under ``bench/``, the gateway runs from the
repository root."""

from __future__ import annotations

from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = BENCH_DIR.parent
