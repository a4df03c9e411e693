"""Helpers of the Debian package tests: build (cached), install, purge, the shipped
config with its marked values filled, and the unit's command lines.

The tests install the package on this machine (dev machines and CI are disposable and
run as root) and purge it afterwards.
"""

from __future__ import annotations

import grp
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from tests.conftest import in_ci

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build-deb.sh"
LOCK_FILE = REPO_ROOT / "requirements" / "gateway.lock"
UNIT = Path("/lib/systemd/system/gateway.service")
CONFIG = Path("/etc/gateway/config.yaml")
TLS_DIR = Path("/etc/gateway/tls")
SERVICE_USER = "gateway"
BUILD_TOOLS = ("dpkg-buildpackage", "dh_virtualenv")

# Every "<CHANGE-ME: ...>" of the shipped config, and what the tests fill in. The host
# names are only names: nothing is resolved until a browser signs in.
FILLED = {
    '"<CHANGE-ME: /etc/gateway/tls/fullchain.pem>"': "tls/test-fullchain.pem",
    '"<CHANGE-ME: /etc/gateway/tls/privkey.pem>"': "tls/test-privkey.pem",
    '"<CHANGE-ME: https://authenticate.example.com>"': "https://authenticate.gateway.test",
    '"<CHANGE-ME: https://idp.example.com>"': "https://idp.gateway.test",
    '"<CHANGE-ME: the client ID registered at the provider>"': "gateway",
    '"<CHANGE-ME: the client secret registered at the provider>"': "client-secret",
    '"<CHANGE-ME: https://app.example.com>"': "https://app.gateway.test",
    '"<CHANGE-ME: http://127.0.0.1:3000>"': "http://127.0.0.1:3000",
    '"<CHANGE-ME: example.com>"': "gateway.test",
}
# The keys `gateway check` names for the shipped, unfilled file.
UNFILLED_PROBLEM_KEYS = (
    "authenticate_service_url", "idp_provider_url", "policy[0].from", "policy[0].to",
    "certificate_file", "certificate_key_file",
)
TEST_HOSTS = ("app.gateway.test", "authenticate.gateway.test")


def require_build_tools() -> None:
    """Skip when the Debian build tools are missing (scripts/setup-dev.sh installs them);
    under CI, where setup-dev.sh ran, fail instead."""
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    if missing and in_ci():
        pytest.fail(f"{', '.join(missing)} missing on CI: scripts/setup-dev.sh installs them",
                    pytrace=False)
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (install: apt-get install "
                    "dpkg-dev debhelper dh-virtualenv lintian; scripts/setup-dev.sh does)")


def run(*args: str, check: bool = True, timeout: float = 300,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command; on failure the assertion shows its output."""
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                            stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise AssertionError(f"{shlex.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def build(version: str | None = None) -> Path:
    """The .deb of this tree (scripts/build-deb.sh, cached by a hash of its inputs)."""
    args = ["bash", str(BUILD_SCRIPT)] + (["--version", version] if version else [])
    result = run(*args, timeout=1500)
    deb = Path(result.stdout.strip().splitlines()[-1])
    return deb if deb.is_absolute() else REPO_ROOT / deb


def package_version(deb: Path) -> str:
    return run("dpkg-deb", "--field", str(deb), "Version").stdout.strip()


def is_installed() -> bool:
    status = run("dpkg-query", "-W", "-f", "${db:Status-Status}", "gateway", check=False)
    return status.returncode == 0 and status.stdout.strip() not in ("", "not-installed")


def apt_install(deb: Path) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run("apt-get", "install", "-y", "-q", "--no-install-recommends", str(deb.resolve()),
        env=env, timeout=600)


def purge() -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run("apt-get", "purge", "-y", "-q", "gateway", env=env, timeout=600)


@contextmanager
def installed(deb: Path) -> Iterator[None]:
    """The package installed from ``deb``, purged afterwards (also when the test fails)."""
    if is_installed():  # a run that was killed half-way: start from a clean machine
        purge()
    try:
        apt_install(deb)
        yield
    finally:
        if is_installed():
            purge()
        remove_test_tls()


def install_test_tls() -> trustme.CA:
    """A certificate for the test hosts where the filled config names it, readable by
    the service's group, as an operator would install one."""
    ca = trustme.CA()
    cert = ca.issue_cert(*TEST_HOSTS)
    gid = grp.getgrnam(SERVICE_USER).gr_gid
    for name, blob in (("test-fullchain.pem", b"".join(b.bytes() for b in cert.cert_chain_pems)),
                       ("test-privkey.pem", cert.private_key_pem.bytes())):
        path = TLS_DIR / name
        path.write_bytes(blob)
        os.chown(path, 0, gid)
        path.chmod(0o640)
    return ca


def remove_test_tls() -> None:
    for name in ("test-fullchain.pem", "test-privkey.pem"):
        (TLS_DIR / name).unlink(missing_ok=True)
    if TLS_DIR.is_dir() and not any(TLS_DIR.iterdir()) and not is_installed():
        TLS_DIR.rmdir()
    if Path("/etc/gateway").is_dir() and not any(Path("/etc/gateway").iterdir()):
        Path("/etc/gateway").rmdir()


def filled_config(shipped: str) -> str:
    """The shipped config with every marked value replaced, and nothing else changed."""
    markers = set(re.findall(r'^[^#\n]*("<CHANGE-ME:[^"]*>")', shipped, re.M))
    assert markers == set(FILLED), f"marked values changed: {sorted(markers ^ set(FILLED))}"
    for marker, value in FILLED.items():
        shipped = shipped.replace(marker, value)
    return shipped


def write_config(text: str) -> None:
    """Rewrite the conffile in place (keeping its owner and mode), as an editor would."""
    with CONFIG.open("w", encoding="utf-8") as out:
        out.write(text)


@dataclass(frozen=True)
class Unit:
    """The command lines, environment and privilege settings of the installed unit."""

    exec_start_pre: list[str]
    exec_start: list[str]
    exec_reload: list[str]
    environment: dict[str, str]
    user: str
    group: str
    ambient_capabilities: list[str]
    capability_bounding_set: list[str]
    no_new_privileges: bool
    memory_deny_write_execute: bool
    system_call_filter: list[str]


def read_unit(path: Path = UNIT) -> Unit:
    values: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            values.setdefault(key.strip(), []).append(value.strip())
    environment: dict[str, str] = {}
    for assignment in values.get("Environment", []):
        for word in shlex.split(assignment):
            name, _, value = word.partition("=")
            environment[name] = value
    (pre,) = values["ExecStartPre"]
    (start,) = values["ExecStart"]
    (reload,) = values["ExecReload"]
    (user,) = values["User"]
    (group,) = values["Group"]

    def words(key: str) -> list[str]:
        return [w for v in values.get(key, []) for w in v.split()]

    def flag(key: str) -> bool:
        return values.get(key, ["no"])[-1] in ("yes", "true", "on", "1")

    system_call_filter = words("SystemCallFilter")
    assert not [w for w in system_call_filter if w.startswith("~")], "deny lists: not emulated"
    return Unit(shlex.split(pre), shlex.split(start), shlex.split(reload), environment, user,
                group, words("AmbientCapabilities"), words("CapabilityBoundingSet"),
                flag("NoNewPrivileges"), flag("MemoryDenyWriteExecute"), system_call_filter)


def syscall_groups() -> dict[str, list[str]]:
    """systemd's named system call sets (``systemd-analyze syscall-filter``)."""
    groups: dict[str, list[str]] = {}
    current: list[str] = []
    for line in run("systemd-analyze", "syscall-filter").stdout.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif line.startswith("    ") and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def allowed_syscalls(filters: list[str]) -> list[str]:
    """The names a SystemCallFilter= allow list (no ``~`` lines here) lets through."""
    groups = syscall_groups()
    names: set[str] = set()

    def add(entry: str) -> None:
        if entry.startswith("@"):
            for member in groups[entry]:
                add(member)
        else:
            names.add(entry)

    for entry in ["@default", *filters]:  # systemd always allows @default
        add(entry)
    return sorted(names)


# Run as the service user, right before the service's program, like systemd's last
# steps: MemoryDenyWriteExecute= as PR_SET_MDWE + PR_MDWE_REFUSE_EXEC_GAIN (Linux 6.3+;
# systemd does it with seccomp), then SystemCallFilter= as a seccomp allow list that
# kills the process on any other system call (systemd's default action). Needs
# python3-seccomp for Debian's python3.
CONFINE = """
import ctypes, json, os, sys
settings = json.loads(sys.argv[1])
if settings["mdwe"]:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(65, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_MDWE)")
if settings["syscalls"]:
    import seccomp
    allow = seccomp.SyscallFilter(seccomp.KILL_PROCESS)
    for name in settings["syscalls"]:
        try:
            allow.add_rule(seccomp.ALLOW, name)
        except (ValueError, RuntimeError, OSError):
            pass  # not a system call of this architecture
    allow.load()
os.execv(sys.argv[2], sys.argv[2:])
"""


def as_service_user(unit: Unit, argv: list[str]) -> list[str]:
    """``argv`` run as the unit would run it: its User= and Group=, its capabilities
    (ambient and bounding set), NoNewPrivileges=, MemoryDenyWriteExecute= and
    SystemCallFilter=."""

    def caps(names: list[str]) -> str:
        return ",".join(["-all"] + [f"+{n.lower().removeprefix('cap_')}" for n in names])

    assert unit.no_new_privileges or not unit.system_call_filter, "seccomp needs no_new_privs"
    command = ["setpriv", f"--reuid={unit.user}", f"--regid={unit.group}", "--init-groups",
               f"--inh-caps={caps(unit.ambient_capabilities)}",
               f"--ambient-caps={caps(unit.ambient_capabilities)}",
               f"--bounding-set={caps(unit.capability_bounding_set)}"]
    if unit.no_new_privileges:
        command.append("--no-new-privs")
    settings = {"mdwe": unit.memory_deny_write_execute,
                "syscalls": allowed_syscalls(unit.system_call_filter)
                if unit.system_call_filter else []}
    return [*command, "--", "/usr/bin/python3", "-c", CONFINE, json.dumps(settings), *argv]
