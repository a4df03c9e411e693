"""Upgrading the Debian package keeps the operator's configuration and secrets."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway import __version__
from tests.packaging import debian
from tests.packaging.debian import CONFIG, run

pytestmark = pytest.mark.packaging


def test_upgrade_keeps_the_edited_conffile() -> None:
    debian.require_build_tools()
    old = debian.build()
    new = debian.build(version=f"{__version__}+1")  # the same tree, changelog bumped
    assert debian.package_version(new) == f"{__version__}+1"
    with debian.installed(old):
        debian.install_test_tls()
        edited = debian.filled_config(CONFIG.read_text(encoding="utf-8"))
        edited += "\n# edited by the operator\n"
        debian.write_config(edited)
        secrets = {p: p.read_bytes() for p in Path("/etc/gateway/secrets").iterdir()}

        debian.apt_install(new)

        status = run("dpkg-query", "-W", "-f", "${Version}", "gateway").stdout
        assert status == f"{__version__}+1"
        assert CONFIG.read_text(encoding="utf-8") == edited
        assert not list(Path("/etc/gateway").glob("config.yaml.dpkg-*"))
        assert stat.S_IMODE(os.stat(CONFIG).st_mode) == 0o640
        assert {p: p.read_bytes() for p in Path("/etc/gateway/secrets").iterdir()} == secrets
        run("/usr/bin/gateway", "check", "--config", str(CONFIG))
