"""One strict build of the documentation per test session, shared by the tests that read
its output: HTML and man pages, with warnings as errors, every cross-reference resolved
(``-n``) and ``--keep-going`` so that one run lists every problem."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.docs.pages import DOCS

SPHINX_BUILD = Path(sys.executable).with_name("sphinx-build")
INSTALL_HINT = ".venv/bin/pip install -e '.[docs]' (scripts/setup-dev.sh does it)"


@dataclass(frozen=True)
class Built:
    out: Path
    seconds: float
    warnings: str


def sphinx(builder: str, out: Path, doctrees: Path, *, fresh: bool) -> Built:
    """``sphinx-build -W --keep-going -n -b BUILDER docs OUT``; fails on any warning.
    ``fresh``: read every page again (-E); else the pages read into ``doctrees`` by an
    earlier build are reused (the man build after the HTML one: it adds only ~1 s)."""
    assert SPHINX_BUILD.exists(), f"sphinx-build is not installed: {INSTALL_HINT}"
    started = time.monotonic()
    result = subprocess.run(
        [str(SPHINX_BUILD), "-q", "-W", "--keep-going", "-n", *(["-E"] if fresh else []),
         "-b", builder, "-d", str(doctrees), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=300, check=False)
    seconds = time.monotonic() - started
    assert result.returncode == 0, f"the {builder} build failed:\n{result.stderr}"
    return Built(out, seconds, result.stderr)
