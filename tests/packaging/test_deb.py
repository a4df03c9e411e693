"""The Debian package: build it (cached), inspect it, lint it, install it, run its
service as the unit would, purge it.

Skipped only when dpkg-buildpackage or dh-virtualenv is missing; scripts/setup-dev.sh
installs them, so CI runs these tests. They install and purge the package on this
machine (dev machines and CI are disposable and run as root).
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import signal
import socket
import ssl
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway import __version__
from tests.packaging import debian
from tests.packaging.debian import CONFIG, SERVICE_USER, UNIT, run

pytestmark = pytest.mark.packaging


@pytest.fixture(scope="module")
def deb() -> Path:
    debian.require_build_tools()
    return debian.build()


def test_package_contents(deb: Path) -> None:
    assert deb.name == f"gateway_{__version__}_amd64.deb"
    listing = run("dpkg-deb", "-c", str(deb)).stdout
    paths = {line.split()[5].lstrip(".") for line in listing.splitlines()}
    for path in ("/opt/gateway/bin/twistd", "/opt/gateway/bin/gateway", "/usr/bin/gateway",
                 "/lib/systemd/system/gateway.service", "/usr/lib/sysusers.d/gateway.conf",
                 "/usr/lib/tmpfiles.d/gateway.conf", "/etc/gateway/config.yaml",
                 "/etc/gateway/secrets/", "/etc/gateway/tls/",
                 "/usr/share/man/man1/gateway.1.gz",
                 "/usr/share/man/man8/gateway-daemon.8.gz",
                 "/usr/share/man/man5/gateway.yaml.5.gz",
                 "/usr/share/doc/gateway/examples/config.example.yaml",
                 "/opt/gateway/lib/python3.11/site-packages/twisted/plugins/gateway_plugin.py",
                 "/opt/gateway/lib/python3.11/site-packages/twisted/plugins/dropin.cache"):
        assert path in paths, f"{path} is not in the package"
    assert "/usr/bin/gateway -> /opt/gateway/bin/gateway" in listing
    assert not [p for p in paths if "/tests/" in p and p.startswith("/opt/gateway/lib/"
                                                                   "python3.11/site-packages/gateway/")]

    info = run("dpkg-deb", "-I", str(deb)).stdout
    for script in ("postinst", "postrm", "prerm", "conffiles"):
        assert re.search(rf"^\s+\d+ bytes,\s+\d+ lines\s+\*?\s*{script}\b", info, re.M), script
    conffiles = run("dpkg-deb", "--info", str(deb), "conffiles").stdout.split()
    assert conffiles == ["/etc/gateway/config.yaml"]
    depends = run("dpkg-deb", "--field", str(deb), "Depends").stdout
    assert "python3.11" in depends
    assert "systemd | systemd-standalone-sysusers" in depends


def test_venv_holds_exactly_the_locked_packages(deb: Path, tmp_path: Path) -> None:
    """Two builds give the same set of packages: the lock file's, plus the project and
    the pip of Debian's python3.11-venv."""
    run("dpkg-deb", "-x", str(deb), str(tmp_path))
    site = tmp_path / "opt/gateway/lib/python3.11/site-packages"
    installed = set()
    for info in site.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").partition("-")
        installed.add((name.lower().replace("_", "-"), version))
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", debian.LOCK_FILE.read_text(), re.M)
    locked = {(n.lower().replace("_", "-").replace(".", "-"), v) for n, v in pins}
    normalized = {(n.replace(".", "-"), v) for n, v in installed}
    extra = {n for n, _ in normalized - locked}
    assert extra == {"gateway", "pip"}, normalized ^ locked
    assert locked <= normalized


def test_lintian_is_clean(deb: Path) -> None:
    result = run("lintian", "--fail-on", "error,warning", str(deb), check=False,
                 timeout=900)
    tags = [line for line in result.stdout.splitlines() if re.match(r"^[EWX]: ", line)]
    assert result.returncode == 0 and not tags, result.stdout + result.stderr


@pytest.fixture(scope="module")
def installed(deb: Path) -> Iterator[None]:
    with debian.installed(deb):
        yield


def test_installed_files_user_and_modes(installed: None) -> None:
    user = pwd.getpwnam(SERVICE_USER)
    assert user.pw_dir == "/var/lib/gateway"
    assert user.pw_shell in ("/usr/sbin/nologin", "/sbin/nologin")
    assert user.pw_uid < 1000
    expected = {
        "/etc/gateway": ("root", "gateway", 0o750),
        "/etc/gateway/config.yaml": ("root", "gateway", 0o640),
        "/etc/gateway/secrets": ("root", "gateway", 0o750),
        "/etc/gateway/secrets/shared_secret": ("root", "gateway", 0o640),
        "/etc/gateway/secrets/cookie_secret": ("root", "gateway", 0o640),
        "/etc/gateway/secrets/signing-key.pem": ("root", "gateway", 0o640),
        "/etc/gateway/secrets/ssh_host_ed25519_key": ("root", "gateway", 0o640),
        "/etc/gateway/secrets/ssh_user_ca_key": ("root", "gateway", 0o640),
        "/etc/gateway/secrets/ssh_user_ca_key.pub": ("root", "root", 0o644),
        "/etc/gateway/tls": ("root", "gateway", 0o750),
        "/var/lib/gateway": ("gateway", "gateway", 0o750),
    }
    for path, (owner, group, mode) in expected.items():
        st = os.stat(path)
        actual = (pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name,
                  stat.S_IMODE(st.st_mode))
        assert actual == (owner, group, mode), f"{path}: {actual}"
    assert Path("/etc/systemd/system/multi-user.target.wants/gateway.service").is_symlink()
    assert run("/usr/bin/gateway", "version").stdout.startswith(f"gateway {__version__} ")
    help_text = run("/opt/gateway/bin/twistd", "--help").stdout
    assert re.search(r"^\s+gateway\s", help_text, re.M)


def test_man_pages_work_after_install(installed: None) -> None:
    """`man gateway` (and the daemon's and the configuration's pages) as a user would
    ask for them after `apt install`: found by name in /usr/share/man and rendered
    without a warning (the configuration's page lists the settings)."""
    env = {**os.environ, "LC_ALL": "C.UTF-8", "MANWIDTH": "80", "MANPAGER": "cat",
           "PAGER": "cat"}
    for section, name, needle in (("1", "gateway", "gateway policy check"),
                                  ("8", "gateway-daemon", "SIGHUP"),
                                  ("5", "gateway.yaml", "idp_provider_url")):
        shown = run("man", "--warnings", section, name, env=env)
        assert f"/usr/share/man/man{section}/{name}.{section}.gz" == run(
            "man", "-w", section, name, env=env).stdout.strip()
        assert shown.stderr == "", (name, shown.stderr)
        assert re.search(rf"^{re.escape(name.upper())}\({section}\)", shown.stdout), name
        assert needle in shown.stdout, (name, needle)


def test_shipped_config_fails_loudly_until_filled(installed: None) -> None:
    unfilled = run("/usr/bin/gateway", "check", "--config", str(CONFIG), check=False)
    assert unfilled.returncode == 1
    for key in debian.UNFILLED_PROBLEM_KEYS:
        assert re.search(rf"^\s+{re.escape(key)}: ", unfilled.stderr, re.M), unfilled.stderr
    debian.install_test_tls()
    debian.write_config(debian.filled_config(CONFIG.read_text(encoding="utf-8")))
    filled = run("/usr/bin/gateway", "check", "--config", str(CONFIG))
    assert filled.stdout.startswith(f"ok: {CONFIG}: services=all"), filled.stdout
    assert "warning" not in filled.stderr


def test_systemd_analyze(installed: None) -> None:
    verify = run("systemd-analyze", "verify", str(UNIT), check=False)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    security = run("systemd-analyze", "--offline=true", "security", str(UNIT)).stdout
    match = re.search(r"Overall exposure level for gateway.service: ([\d.]+) (\w+)", security)
    assert match, security
    assert float(match[1]) <= 2.5 and match[2] == "OK", match[0]


@pytest.fixture
def notify_socket() -> Iterator[tuple[socket.socket, str]]:
    """A NOTIFY_SOCKET the service user can write to, as systemd gives Type=notify units."""
    directory = tempfile.mkdtemp(prefix="gateway-notify-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o666)
        yield sock, path
    finally:
        sock.close()
        os.unlink(path)
        os.rmdir(directory)


def wait_for_line(log: Path, pattern: str, deadline: float) -> dict[str, object]:
    """The first JSON log line whose message matches ``pattern``, waiting until ``deadline``."""
    while True:
        text = log.read_text(encoding="utf-8")
        complete = text[: text.rfind("\n") + 1]  # a line being written is read next time
        for line in complete.splitlines():
            event = json.loads(line)
            if re.search(pattern, str(event.get("message", ""))):
                return dict(event)
        if time.monotonic() > deadline:
            raise AssertionError(f"no log line matching {pattern!r}:\n{log.read_text()}")
        time.sleep(0.1)


def test_service_runs_as_the_unit_says(
    installed: None, notify_socket: tuple[socket.socket, str], tmp_path: Path
) -> None:
    """ExecStartPre and ExecStart of the installed unit, as its User, with its
    Environment, capabilities, NoNewPrivileges, MemoryDenyWriteExecute and
    SystemCallFilter (what systemd would enforce, short of namespaces); the listeners
    on loopback port 0 (as a drop-in's Environment= would), then ExecReload and SIGTERM."""
    if "certificate_file: tls/test-fullchain.pem" not in CONFIG.read_text():
        debian.install_test_tls()
        debian.write_config(debian.filled_config(CONFIG.read_text(encoding="utf-8")))
    unit = debian.read_unit()
    assert unit.user == SERVICE_USER
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "LANG": "C.UTF-8", **unit.environment}
    pre = run(*debian.as_service_user(unit, unit.exec_start_pre), env=env)
    assert pre.stdout.startswith("ok: ")

    sock, notify_path = notify_socket
    env.update(NOTIFY_SOCKET=notify_path, ADDRESS="127.0.0.1:0",
               HTTP_REDIRECT_ADDR="127.0.0.1:0")
    log = tmp_path / "journal.jsonl"
    with log.open("wb") as out:
        proc = subprocess.Popen(debian.as_service_user(unit, unit.exec_start), env=env,
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        sock.settimeout(60)
        assert sock.recv(4096).startswith(b"READY=1"), log.read_text()
        deadline = time.monotonic() + 30
        started = wait_for_line(log, r"HTTPFactory \(TLS\) starting on \d+", deadline)
        port = int(str(started["message"]).rsplit(" ", 1)[1])
        assert_https_ping(port)

        reload = [arg.replace("$MAINPID", str(proc.pid)) for arg in unit.exec_reload]
        run(*reload)
        wait_for_line(log, r"^configuration reload \(SIGHUP\)", time.monotonic() + 30)

        proc.terminate()
        # twistd ends itself with the signal it stopped for; systemd counts SIGTERM as a
        # clean exit of a service.
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM), log.read_text()
        wait_for_line(log, r"^Server Shut Down\.$", time.monotonic() + 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = log.read_text(encoding="utf-8").splitlines()
    assert all(json.loads(line)["message"] is not None for line in lines)  # journal: JSON
    assert not [line for line in lines if "plugin cache" in line]
    assert not [line for line in lines if '"level": "error"' in line], lines


def assert_https_ping(port: int) -> None:
    """``GET /ping`` over TLS (the configured certificate) answers OK."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # a throwaway test CA; TLS itself is what counts
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=debian.TEST_HOSTS[0]) as tls:
        tls.sendall(b"GET /ping HTTP/1.1\r\nHost: app.gateway.test\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := tls.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert answer.endswith(b"\r\n\r\nOK\n"), answer


def test_purge_removes_what_the_package_made(installed: None, deb: Path) -> None:
    """Last of the module: purge, then nothing of the package's is left but the user,
    and an operator's own file (the test certificate) stays."""
    debian.install_test_tls()
    debian.purge()
    for path in ("/opt/gateway", "/usr/bin/gateway", "/etc/gateway/config.yaml",
                 "/etc/gateway/secrets", "/var/lib/gateway", str(UNIT),
                 "/etc/systemd/system/multi-user.target.wants/gateway.service"):
        assert not os.path.lexists(path), f"{path} is left after purge"
    assert Path("/etc/gateway/tls/test-privkey.pem").exists()
    overrides = run("dpkg-statoverride", "--list").stdout
    assert "/etc/gateway" not in overrides
    pwd.getpwnam(SERVICE_USER)  # kept on purge, as is usual on Debian (see postrm)
    debian.remove_test_tls()
    assert not os.path.exists("/etc/gateway")
