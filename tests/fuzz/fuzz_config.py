"""Fuzz target: the configuration loader (``gateway.config.load_snapshot``: YAML, JSON,
TOML and Java properties files, typing, validation, policy compilation), and the data
plane's plan built from what it accepts.

Input: one byte choosing the file format (its value modulo 4: YAML, JSON, TOML,
properties), then the file's content. The environment is empty.

Contract: a file either loads into a ``Snapshot`` that the data plane compiles into a
plan, or is refused with ``ConfigErrors`` whose every problem renders as a non-empty
line; never another exception (a bad file is an error message, not a traceback).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from tests.fuzz.harness import describe, fuzz, instrumented

with instrumented("gateway", "yaml", "javaproperties"):
    from gateway.config import ConfigErrors, load_snapshot
    from gateway.dataplane.routing.plan import build_plan

EXTENSIONS = (".yaml", ".json", ".toml", ".properties")
_DIRECTORY = tempfile.mkdtemp(prefix="gateway-fuzz-config-")
atexit.register(shutil.rmtree, _DIRECTORY, True)


def TestOneInput(data: bytes) -> None:
    if not data:
        return
    path = os.path.join(_DIRECTORY, "config" + EXTENSIONS[data[0] % 4])
    with open(path, "wb") as handle:
        handle.write(data[1:])
    try:
        snapshot = load_snapshot(path, {}, now=0.0)
    except ConfigErrors as exc:
        assert exc.problems, describe(data)
        for problem in exc.problems:
            assert str(problem).strip(), describe(data)
        exc.render()
        return
    finally:
        os.unlink(path)
    build_plan(snapshot)


if __name__ == "__main__":
    fuzz(TestOneInput)
