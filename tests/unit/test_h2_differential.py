"""``http2.engine`` against ``h2`` (the library it replaced) on the same client bytes: the
hand-written corpus (``tests/support/h2_corpus.py``) and hypothesis-generated sequences
(``tests/support/h2_sequences.py``). Both must hand up the same requests (stream id,
headers, body, end of stream), send the same RST_STREAMs (stream id, code), report the
same client resets and GOAWAY, answer the same streams, and close the connection with
the same GOAWAY code, once ``h2``'s answer is normalised by the rules of
``tests/support/h2_differential_rules.py`` (each an RFC sentence; no blanket ignore)."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings

from gateway.dataplane.http2 import fields
from tests.support import h2frames as f
from tests.support.h2_corpus import CASES, OK, RESET
from tests.support.h2_differential import Outcome, Step, chunks, run_engine, run_h2
from tests.support.h2_sequences import sequences

# Bounded and deterministic (the same examples on every run): about 3 s.
GENERATED = settings(max_examples=400, derandomize=True, database=None, deadline=None)


def compare(steps: list[Step]) -> Outcome:
    """The engine's outcome, asserted equal to h2's normalised one."""
    cut = chunks(steps)
    expected = run_h2(cut)
    actual = run_engine(cut, stop=expected.stopped)
    assert actual.summary() == expected.summary(), (
        f"engine:          {actual}\nh2 (normalised): {expected}")
    return actual


def assert_expected(name: str, outcome: Outcome) -> None:
    """What the case is named for (RFC 9113), so a corpus case cannot rot into one that
    tests nothing."""
    expect = CASES[name][0]
    if expect == OK:
        assert (outcome.resets, outcome.goaway) == ([], None), outcome
    elif expect == RESET:
        assert outcome.resets and outcome.goaway is None, outcome
    else:
        assert outcome.goaway == expect, outcome


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus(name: str) -> None:
    assert_expected(name, compare(CASES[name][1](f.Frames())))


def test_generated_sequences() -> None:
    """Hypothesis-generated sequences agree; and they reach requests, resets, answers
    and connection errors (a generator that stopped doing so would test little)."""
    seen: Counter[str] = Counter()

    @GENERATED
    @given(sequences())
    def agree(steps: list[Step]) -> None:
        outcome = compare(steps)
        seen["sequences"] += 1
        seen["requests"] += bool(outcome.requests)
        seen["bodies"] += any(r.body for r in outcome.requests.values())
        seen["resets"] += bool(outcome.resets)
        seen["answered"] += any(ok for _, ok in outcome.answered)
        seen["goaway"] += outcome.goaway is not None

    agree()
    total = seen["sequences"]
    assert total >= 300, seen
    for kind in ("requests", "resets", "goaway"):
        assert seen[kind] >= total // 10, seen
    assert seen["bodies"] and seen["answered"], seen


def test_a_planted_difference_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The differential can fail: an engine that let upper-case field names through
    differs from h2 on the corpus case that sends one."""
    monkeypatch.setattr(fields, "_H2_BAD_NAME", re.compile(rb"[\x00-\x20\x7f-\xff]"))
    with pytest.raises(AssertionError, match="engine:"):
        compare(CASES["upper-case-name"][1](f.Frames()))
