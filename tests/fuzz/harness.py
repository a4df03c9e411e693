"""What every fuzz target shares: the coverage switch and the libFuzzer entry point.

A target module imports the code under test inside ``with instrumented(...)``; under
``tests/fuzz/run.py`` (which sets ``GATEWAY_FUZZ_INSTRUMENT=1``) that is atheris'
``instrument_imports`` for the named packages, so libFuzzer is guided by the coverage of
our parsers (and of the libraries they drive). Imported by pytest to replay the corpus,
nothing is instrumented and atheris is not needed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

INSTRUMENT_ENV = "GATEWAY_FUZZ_INSTRUMENT"
TestOneInput = Callable[[bytes], None]


@contextlib.contextmanager
def instrumented(*packages: str) -> Iterator[None]:
    """Instrument modules of ``packages`` imported inside the block (when fuzzing)."""
    if os.environ.get(INSTRUMENT_ENV) != "1":
        yield
        return
    import atheris

    with atheris.instrument_imports(include=list(packages)):
        yield


def fuzz(test_one_input: TestOneInput) -> None:
    """libFuzzer's main loop; ``sys.argv`` holds its options and corpus directories."""
    import atheris

    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


def chunks(data: bytes, sizes: bytes) -> list[bytes]:
    """``data`` cut at positions chosen by ``sizes`` (each byte one chunk length, 0 read
    as 1), so a parser is also fed its input split across reads."""
    out: list[bytes] = []
    position = 0
    for size in sizes:
        if position >= len(data):
            break
        step = size or 1
        out.append(data[position:position + step])
        position += step
    if position < len(data):
        out.append(data[position:])
    return out


def split_input(data: bytes) -> tuple[bytes, bytes]:
    """The input as (chunk sizes, payload): a first byte ``n`` gives the number of size
    bytes that follow (``n % 8``); the rest is the payload."""
    if not data:
        return b"", b""
    count = data[0] % 8
    return data[1:1 + count], data[1 + count:]


def describe(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
