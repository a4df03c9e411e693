"""requirements/gateway.lock matches setup.cfg: no build needed to notice a dependency
added to install_requires without `bash scripts/lock.sh`."""

from __future__ import annotations

import configparser
import re

from packaging.requirements import Requirement

from tests.packaging.debian import LOCK_FILE, REPO_ROOT


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_install_requirement_is_locked_with_hashes() -> None:
    setup = configparser.ConfigParser()
    setup.read(REPO_ROOT / "setup.cfg", encoding="utf-8")
    required = [Requirement(line) for line in
                setup["options"]["install_requires"].strip().splitlines()]
    text = LOCK_FILE.read_text(encoding="utf-8")
    pins = {canonical(name): version
            for name, version in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", text, re.M)}
    for requirement in required:
        version = pins.get(canonical(requirement.name))
        assert version is not None, f"{requirement.name} is not in {LOCK_FILE.name}: " \
                                    "run bash scripts/lock.sh"
        assert requirement.specifier.contains(version), \
            f"{requirement} but {LOCK_FILE.name} pins {version}: run bash scripts/lock.sh"
    for block in re.split(r"\n(?=\S)", text):
        if "==" in block and not block.startswith("#"):
            assert "--hash=sha256:" in block, f"no hash: {block.splitlines()[0]}"
