"""Helpers of the container image tests: podman invoked as these machines need it, the
image (scripts/build-image.sh, cached by a hash of its inputs), a running container, and
a Redis image made from Debian's redis-server for deploy/compose.yaml.

Rootful podman (the tests run as root, like the Debian package tests). The global flags
are what this kind of machine needs (crun fails here, and there is no systemd to manage
cgroups), not the image's business: see /etc/containers/containers.conf's
``default_ulimits = []``, which scripts/setup-dev.sh writes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import in_ci
from tests.packaging.debian import REPO_ROOT, run

BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-image.sh"
COMPOSE_FILE = REPO_ROOT / "deploy" / "compose.yaml"
PODMAN = ("podman", "--runtime", "runc", "--cgroup-manager=cgroupfs")
TOOLS = ("podman", "runc", "buildah", "mmdebstrap")
IMAGE_UID = 65532
REDIS_IMAGE = "localhost/gateway-test-redis:bookworm"


def require_podman() -> None:
    """Skip when podman cannot run containers here (no root, tools missing, podman
    broken), saying why; under CI, where setup-dev.sh installed and configured it, fail."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    problem = ""
    if missing:
        problem = (f"{', '.join(missing)} not installed (apt-get install podman runc buildah "
                   "mmdebstrap podman-compose; scripts/setup-dev.sh does)")
    elif os.getuid() != 0:
        problem = "the image tests need root (rootful podman, mmdebstrap's root mode)"
    else:
        probe = subprocess.run([*PODMAN, "info", "--format", "{{.Host.OCIRuntime.Name}}"],
                               capture_output=True, text=True, timeout=60,
                               stdin=subprocess.DEVNULL)
        if probe.returncode != 0:
            problem = f"podman cannot run here: {probe.stderr.strip()[-400:]}"
    if problem and in_ci():
        pytest.fail(problem, pytrace=False)
    if problem:
        pytest.skip(problem)


def build_image() -> tuple[str, float]:
    """The image of this tree and how long getting it took (seconds; a cached build
    returns in about a second)."""
    started = time.monotonic()
    result = run("bash", str(BUILD_SCRIPT), timeout=1800)
    return result.stdout.strip().splitlines()[-1], time.monotonic() - started


def podman(*args: str, check: bool = True, timeout: float = 120
           ) -> subprocess.CompletedProcess[str]:
    return run(*PODMAN, *args, check=check, timeout=timeout)


def inspect_image(image: str) -> dict[str, Any]:
    (info,) = json.loads(podman("image", "inspect", image).stdout)
    result: dict[str, Any] = info
    return result


@dataclass(frozen=True)
class Container:
    name: str

    def logs(self) -> str:
        """Standard output and error so far (podman keeps them apart in k8s-file logs,
        and gives them back on its own stdout and stderr)."""
        result = podman("logs", self.name, check=False)
        return result.stdout + result.stderr

    def exec(self, *args: str, env: dict[str, str] | None = None,
             check: bool = True) -> subprocess.CompletedProcess[str]:
        flags = [f"--env={k}={v}" for k, v in (env or {}).items()]
        return podman("exec", *flags, self.name, *args, check=check)

    def python(self, code: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``code`` in the container with the gateway's Python (there is no shell)."""
        return self.exec("/opt/gateway/bin/python", "-I", "-c", code, check=check)

    def state(self) -> dict[str, Any]:
        (info,) = json.loads(podman("inspect", self.name).stdout)
        state: dict[str, Any] = info["State"]
        return state


@contextmanager
def running(image: str, *args: str, options: tuple[str, ...] = ()) -> Iterator[Container]:
    """``podman run -d --network host`` of ``image`` (``args`` replace its CMD); removed
    afterwards with its anonymous volumes. On a failure the container's log is printed
    (pytest shows it)."""
    name = f"gateway-test-{uuid.uuid4().hex[:10]}"
    podman("run", "--detach", "--name", name, "--network", "host", *options, image, *args)
    container = Container(name)
    try:
        yield container
    except BaseException:
        print(f"--- log of container {name} ---\n{container.logs()[-8000:]}")
        raise
    finally:
        podman("rm", "--force", "--volumes", "--time", "0", name, check=False)


def build_redis_image() -> str:
    """Redis from Debian's redis-server (no registry here), for deploy/compose.yaml's
    REDIS_IMAGE: mmdebstrap's "extract" variant, imported once per machine."""
    if podman("image", "exists", REDIS_IMAGE, check=False).returncode == 0:
        return REDIS_IMAGE
    work = Path(REPO_ROOT / ".cache" / f"redis-image.{uuid.uuid4().hex[:8]}")
    work.mkdir(parents=True)
    try:
        rootfs = work / "rootfs.tar"
        run("mmdebstrap", "--quiet", "--variant=extract", "--mode=root",
            "--include=redis-server", "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-exclude=/usr/share/man/*", "bookworm", str(rootfs),
            "deb http://deb.debian.org/debian bookworm main",
            "deb http://deb.debian.org/debian-security bookworm-security main", timeout=900)
        podman("import", "--change", 'CMD ["redis-server"]', "--change", "EXPOSE 6379",
               str(rootfs), REDIS_IMAGE, timeout=300)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return REDIS_IMAGE
