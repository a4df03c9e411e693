"""conf/ssh.example.yaml, the configuration of the native SSH tutorial
(docs/tutorials/native-ssh.md includes the file: tests/docs/test_examples.py holds it to
that): it passes ``gateway check`` as shipped (with the two keys its comments make), and it
runs with only its ports, paths and server moved: a real sshd that trusts the example's
user CA, the tutorial's ssh command, sign-in at node-oidc-provider, a recording."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from gateway.cli.check import run_check
from tests.support.daemon import REPO_ROOT, gateway_daemon
from tests.support.peers import oidc_provider
from tests.support.processes import free_port, wait_until
from tests.support.ssh_native import cert_sshd, keygen, sign_in_ssh, ssh_argv
from tests.support.tcp_client import callback_uri

pytestmark = pytest.mark.integration
EXAMPLE = REPO_ROOT / "conf" / "ssh.example.yaml"


def shipped(tmp_path: Path) -> Path:
    """The example, unchanged, in a directory with the keys its comments make."""
    folder = tmp_path / "conf"
    folder.mkdir()
    shutil.copy(EXAMPLE, folder / "ssh.example.yaml")
    (folder / "ssh-keys").mkdir()
    keygen(folder / "ssh-keys" / "host_ed25519", "gateway host")
    keygen(folder / "ssh-keys" / "user_ca", "gateway user CA")
    return folder / "ssh.example.yaml"


def moved(text: str, replacements: dict[str, str]) -> str:
    for old, new in replacements.items():
        assert old in text, f"{old!r} is no longer in {EXAMPLE.name}"
        text = text.replace(old, new)
    return text


def test_example_passes_check_as_shipped(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert run_check(str(shipped(tmp_path)), sys.stdout, sys.stderr) == 0
    out = capsys.readouterr()
    assert "warnings=0" in out.out, out


def test_tutorial_shows_the_command_run_here() -> None:
    page = (REPO_ROOT / "docs" / "tutorials" / "native-ssh.md").read_text()
    assert "ssh -p 2222 root@box@gateway.example.com" in page


def test_tutorial_command_against_the_example(tmp_path: Path) -> None:
    """ssh -p 2222 root@box@127.0.0.1 as alice (an admin): signed in once, the
    command runs on the server, and the session with a terminal is recorded."""
    path = shipped(tmp_path)
    ca_public = (path.parent / "ssh-keys" / "user_ca.pub").read_text().strip()
    port, ssh_port = free_port(), free_port()
    recordings = tmp_path / "recordings"
    with cert_sshd(tmp_path, ca_public) as server, \
            oidc_provider(tmp_path, [callback_uri(port)]) as op:
        config = yaml.safe_load(moved(path.read_text(), {
            ":8080": f":{port}",
            "http://127.0.0.1:9000": op.issuer,
            "127.0.0.1:2222": f"127.0.0.1:{ssh_port}",
            "to: ssh://127.0.0.1:22\n": f"to: ssh://127.0.0.1:{server.port}\n",
            "ssh-keys/": f"{path.parent}/ssh-keys/",
            "/tmp/gateway-ssh-recordings": str(recordings),
            "[root, deploy]": f"[{server.user}, deploy]",
        }))
        with gateway_daemon(tmp_path, config, port=port) as gateway:
            wait_until(lambda: gateway.logged("ssh: listening"), 10, what="ssh listener")
            key = keygen(tmp_path / "alice", "alice's laptop")
            # ssh -p 2222 root@box@127.0.0.1
            proc, seen, _ = sign_in_ssh(ssh_argv(key, ssh_port, f"{server.user}@box",
                                                 "echo hello from box",
                                                 options=("RequestTTY=force",)),
                                        "alice@example.test")
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, (seen + err).decode()
            assert b"hello from box" in out
            assert gateway.logged("pinned the server's host key")
    casts = list(recordings.rglob("*.cast"))
    assert len(casts) == 1 and "hello from box" in casts[0].read_text()
