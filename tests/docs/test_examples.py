"""Examples in the documentation are what the code does: the `gateway policy check` runs
shown in the first-policy tutorial and the CLI reference print, line for line, what the
command prints for conf/policy.example.yaml, with the exit status shown."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from gateway.cli import main
from gateway.config.audit_fields import AUDIT_FIELDS
from tests.docs.pages import DOCS, marked_blocks


def run_transcript(transcript: str) -> None:
    """A ``$ gateway ...`` command (``\\``-continued), its output, ``$ echo $?`` and the
    status: the command is run in the repository and must print that output."""
    lines = transcript.rstrip("\n").split("\n")
    assert lines[0].startswith("$ gateway "), lines[0]
    command = [lines[0]]
    while command[-1].endswith("\\"):
        command.append(lines[len(command)])
    shown = lines[len(command):]
    assert shown[-2] == "$ echo $?", shown[-2:]
    words = shlex.split(" ".join(line.rstrip("\\") for line in command).lstrip("$ "))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.chdir(DOCS.parent):
        code = main(words[1:])
    assert out.getvalue().rstrip("\n").split("\n") == shown[:-2]
    assert code == int(shown[-1])


def cli_reference_transcript() -> str:
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    section = text.split("(cli-policy-check)=", 1)[1]
    return "$ gateway policy check" + section.split("\n$ gateway policy check", 1)[1].split(
        "\n```", 1)[0]


@pytest.mark.parametrize("transcript", [
    pytest.param(lambda: marked_blocks("tutorials/first-policy.md")["alice"], id="tutorial"),
    pytest.param(cli_reference_transcript, id="cli-reference"),
])
def test_policy_check_transcripts(transcript: object) -> None:
    run_transcript(transcript())  # type: ignore[operator]


def test_audit_field_table_is_the_codes_list() -> None:
    """The reference's table of audit fields names every field of AUDIT_FIELDS, in the
    order they are written, and no other."""
    text = (DOCS / "reference" / "logs.md").read_text(encoding="utf-8")
    table = text.split("(audit-fields)=", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    named = [name for row in rows
             for name in re.findall(r"`([a-z0-9_]+)`", row.split(" | ", 1)[0])]
    assert named == list(AUDIT_FIELDS)


@pytest.mark.parametrize(("page", "example"), [
    ("reference/policy.md", "policy.example.yaml"),
    ("tutorials/first-policy.md", "policy.example.yaml"),
    ("tutorials/tcp-tunnel.md", "tcp.example.yaml"),
    ("tutorials/native-ssh.md", "ssh.example.yaml"),
    ("how-to/bearer-tokens.md", "machine-callers.example.yaml"),
    ("how-to/mcp-servers.md", "mcp.example.yaml"),
])
def test_pages_show_the_shipped_examples(page: str, example: str) -> None:
    """The pages that show a configuration include the shipped file itself (which its
    integration test runs), so the page cannot drift from what is tested."""
    text = (DOCS / page).read_text(encoding="utf-8")
    assert f"```{{literalinclude}} {'../' * (page.count('/') + 1)}conf/{example}\n" in text
    assert (DOCS.parent / "conf" / example).is_file()


@pytest.mark.parametrize(("page", "example"), [
    ("how-to/otlp.md", "conf/otel.example.yaml"),
    ("how-to/otlp.md", "conf/tracing.example.yaml"),
    ("how-to/forward-auth.md", "conf/forward-auth/"),
])
def test_pages_point_at_the_examples(page: str, example: str) -> None:
    assert example in (DOCS / page).read_text(encoding="utf-8")
