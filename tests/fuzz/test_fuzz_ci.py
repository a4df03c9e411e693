"""The fuzz targets in the test suite: every corpus input replayed (deterministic, no
atheris needed), then a bounded coverage-guided run of every target (about a minute in
all, each in its own subprocess; see ``run.py``, and docs/development/fuzzing.md for long
runs).

A replayed input that breaks a target's contract fails with the input named; a crash
found by the bounded run fails with the crashing input printed. Finding nothing passes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

import pytest

from tests.conftest import in_ci
from tests.fuzz import run

TOTAL_SECONDS = int(os.environ.get("GATEWAY_FUZZ_SECONDS", "42"))


@pytest.mark.parametrize("target", run.TARGETS)
def test_corpus_replays(target: str) -> None:
    """Every input of ``corpus/<target>`` keeps the target's contract."""
    module = importlib.import_module(f"tests.fuzz.fuzz_{target}")
    inputs = sorted((run.CORPUS / target).iterdir())
    assert inputs, f"corpus/{target} is empty"
    for path in inputs:
        data = path.read_bytes()
        try:
            module.TestOneInput(data)
        except Exception as exc:
            shown = data[:run.SHOW]
            raise AssertionError(f"corpus/{target}/{path.name} ({shown!r}): "
                                 f"{type(exc).__name__}: {exc}") from exc


def test_corpus_is_small() -> None:
    """The corpus stays a few hundred KB (long runs keep what they find elsewhere)."""
    size = sum(p.stat().st_size for p in run.CORPUS.rglob("*") if p.is_file())
    assert size < 400 * 1024, f"tests/fuzz/corpus holds {size} bytes"


@pytest.mark.fuzz
@pytest.mark.parametrize("target", run.TARGETS)
def test_bounded_fuzzing(target: str, tmp_path: Path) -> None:
    """libFuzzer on ``target`` for its share of ``TOTAL_SECONDS``, from the corpus."""
    if importlib.util.find_spec("atheris") is None:
        message = "atheris is not installed (pip install -e '.[test]')"
        if in_ci():
            pytest.fail(message + "; CI is set, so this fails instead of skipping")
        pytest.skip(message)
    seconds = max(TOTAL_SECONDS // len(run.TARGETS), 1)
    result = run.run_target(target, seconds, tmp_path, ["-seed=1"])
    assert result.ok, result.report()
