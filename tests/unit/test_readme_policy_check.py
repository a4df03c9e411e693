"""The README's `gateway policy check` example is what the command prints for
conf/policy.example.yaml, line for line, with the exit status it shows."""

from __future__ import annotations

import contextlib
import io
import shlex
from pathlib import Path

from gateway.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_example_is_the_commands_output() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Policy", 1)[1]
    example = "$ gateway policy check" + section.split("\n$ gateway policy check", 1)[1]
    example = example.split("\n```", 1)[0]
    lines = example.split("\n")
    command = [lines[0]]
    while command[-1].endswith("\\"):
        command.append(lines[len(command)])
    shown = lines[len(command):]
    assert shown[-2] == "$ echo $?", shown[-2:]
    words = shlex.split(" ".join(line.rstrip("\\") for line in command).lstrip("$ "))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.chdir(REPO):
        code = main(words[1:])
    assert out.getvalue().rstrip("\n").split("\n") == shown[:-2]
    assert code == int(shown[-1])
