"""The container image (scripts/build-image.sh) run with podman: the README's demo
through it (sign-in with the local identity provider, a public route), as uid 65532 on a
read-only root file system, its HEALTHCHECK, reloads of the mounted configuration (on
SIGHUP, and by the file watch), an orderly stop on SIGTERM, a bad configuration refused
with its key; and deploy/compose.yaml (two workers behind one port, Redis as the databroker).

Skipped, saying why, where podman cannot run (not root, tools missing); under CI
(setup-dev.sh installs and configures podman) they run. The image is built once per
tree: the build script caches it by a hash of its inputs (the .deb the package tests
build, the script, deploy/image/).
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from gateway import __version__
from tests.packaging import container, debian
from tests.packaging.container import IMAGE_UID, PODMAN, Container, podman, running
from tests.packaging.debian import REPO_ROOT, run
from tests.support.browser import Browser
from tests.support.peers import oidc_provider
from tests.support.processes import ManagedProcess, free_port, http_ok, wait_until

pytestmark = pytest.mark.packaging

CONFIG_IN_IMAGE = "/etc/gateway/config.yaml"


@pytest.fixture(scope="module")
def image() -> str:
    container.require_podman()
    debian.require_build_tools()
    name, seconds = container.build_image()
    print(f"image {name}: ready in {seconds:.1f}s (build or cache)")
    return name


def config_dir(root: Path, config: dict[str, Any]) -> Path:
    """A directory to mount at /etc/gateway holding ``config.yaml``, readable by the
    image's user (the directory is mounted, not the file: a rename replacing the file
    must be seen)."""
    etc = root / "etc"
    etc.mkdir(exist_ok=True)
    etc.chmod(0o755)
    write_config(etc, config)
    return etc


def write_config(etc: Path, config: dict[str, Any]) -> None:
    tmp = etc / "config.yaml.tmp"
    tmp.write_text(yaml.safe_dump(config))
    tmp.chmod(0o644)
    os.replace(tmp, etc / "config.yaml")


def demo_config(port: int, issuer: str, app_port: int) -> dict[str, Any]:
    """demo/gateway.yaml (the README's demo) with its ports moved."""
    text = (REPO_ROOT / "demo" / "gateway.yaml").read_text()
    text = (text.replace(":8080", f":{port}").replace("http://127.0.0.1:9000", issuer)
            .replace("http://127.0.0.1:8081", f"http://127.0.0.1:{app_port}"))
    config: dict[str, Any] = yaml.safe_load(text)
    return config


def test_image_metadata(image: str) -> None:
    """A non-root user, the one volume, the health check, twistd as the entry point, the
    package's version; under the 150 MB goal."""
    info = container.inspect_image(image)
    config = info["Config"]
    assert config["User"] == f"{IMAGE_UID}:{IMAGE_UID}"
    assert list(config["Volumes"]) == ["/var/lib/gateway"]
    assert config["Entrypoint"] == ["/opt/gateway/bin/twistd", "--nodaemon", "--pidfile=",
                                    "gateway"]
    assert config["Cmd"] == ["--config", CONFIG_IN_IMAGE]
    assert config["Labels"]["org.opencontainers.image.version"] == __version__
    assert info["ManifestType"].endswith("docker.distribution.manifest.v2+json")
    health = info["Healthcheck"]  # (Docker's format: OCI's image config has none)
    assert health["Test"][0] == "CMD" and health["Test"][-1] == "/opt/gateway/healthcheck.py"
    size = int(info["Size"])
    print(f"image size: {size / 1e6:.1f} MB")
    assert size < 150_000_000, f"{size / 1e6:.1f} MB"


Demo = tuple[Container, int, Path]  # the container, its port, its config directory


@pytest.fixture(scope="module")
def demo(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The demo's gateway in a container (read-only root, the config directory mounted
    read-only, its volume), with the identity provider and the demo app on the host's
    loopback (--network host); config polling off, so that only SIGHUP reloads."""
    tmp_path = tmp_path_factory.mktemp("image-demo")
    port, app_port = free_port(), free_port()
    with oidc_provider(tmp_path, [f"http://authenticate.localhost:{port}/oauth2/callback"]
                       ) as op:
        etc = config_dir(tmp_path, demo_config(port, op.issuer, app_port))
        app = ManagedProcess([sys.executable, str(REPO_ROOT / "demo" / "app.py"), "--port",
                              str(app_port)], log_dir=tmp_path, name="demo-app")
        with app:
            app.wait_ready(lambda: http_ok(f"http://127.0.0.1:{app_port}/"), 10)
            started = time.monotonic()
            with running(image, "--config", CONFIG_IN_IMAGE, "--poll-interval", "3600",
                         options=("--read-only", "--volume", f"{etc}:/etc/gateway:ro",
                                  "--env", f"GATEWAY_HEALTHCHECK_URL=http://127.0.0.1:{port}/ping"),
                         ) as gateway:
                wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/ping"), 30,
                           what="the gateway in its container answering /ping")
                print(f"podman run to /ping answered: {time.monotonic() - started:.2f}s")
                yield gateway, port, etc


def test_demo_sign_in_and_public_route(demo: Demo) -> None:
    """The README's demo, the gateway in the image: alice signs in at the local identity
    provider and the app shows her; the public route needs no sign-in."""
    _, port, _ = demo
    browser = Browser()
    first = browser.request("GET", f"http://localhost:{port}/")
    assert first.status == 302
    assert (first.header("location") or "").startswith(f"http://authenticate.localhost:{port}/")
    page = browser.sign_in(f"http://localhost:{port}/", "alice@example.test")
    assert page.status == 200
    assert b"Signed in as <b>alice@example.test</b>" in page.body
    public = Browser().request("GET", f"http://public.localhost:{port}/")
    assert public.status == 200
    assert b"No signed-in user" in public.body


def test_runs_as_non_root_on_read_only_root(demo: Demo) -> None:
    """Every id of the gateway's process (pid 1) is 65532; the root file system refuses
    writes; /var/lib/gateway (the volume, autocert's default directory) takes them."""
    gateway, _, _ = demo
    status = gateway.python("print(open('/proc/1/status').read())").stdout
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    gid_line = next(line for line in status.splitlines() if line.startswith("Gid:"))
    assert uid_line.split()[1:] == [str(IMAGE_UID)] * 4
    assert gid_line.split()[1:] == [str(IMAGE_UID)] * 4
    probe = gateway.python(
        "import errno, pathlib\n"
        "try:\n"
        "    pathlib.Path('/opt/gateway/probe').write_text('x')\n"
        "except OSError as err:\n"
        "    print('root', errno.errorcode[err.errno])\n"
        "pathlib.Path('/var/lib/gateway/probe').write_text('x')\n"
        "print('volume ok')\n"
        "from gateway.config.settings import default_autocert_dir\n"
        "print('autocert', default_autocert_dir())\n").stdout.split("\n")
    assert "root EROFS" in probe
    assert "volume ok" in probe
    assert "autocert /var/lib/gateway" in probe


def test_healthcheck(demo: Demo) -> None:
    """podman's health check (the image's HEALTHCHECK) passes on the configured URL, and
    the probe fails where nothing answers."""
    gateway, _, _ = demo
    result = podman("healthcheck", "run", gateway.name, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    down = gateway.exec("/opt/gateway/bin/python", "-I", "-S", "/opt/gateway/healthcheck.py",
                        env={"GATEWAY_HEALTHCHECK_URL": "http://127.0.0.1:1/ping"}, check=False)
    assert down.returncode == 1
    assert "127.0.0.1:1/ping" in down.stderr


def test_sighup_reloads_the_mounted_config(demo: Demo) -> None:
    """An edit of the mounted file (replaced by rename, as editors do) is served after
    SIGHUP reaches the gateway, pid 1 of the container (polling is off in this one)."""
    gateway, port, etc = demo
    config = yaml.safe_load((etc / "config.yaml").read_text())
    config["policy"].append({"from": f"http://reloaded.localhost:{port}",
                             "to": config["policy"][0]["to"],
                             "allow_public_unauthenticated_access": True})
    write_config(etc, config)
    url = f"http://reloaded.localhost:{port}/"
    assert Browser().request("GET", url).status == 404
    podman("kill", "--signal", "HUP", gateway.name)
    wait_until(lambda: Browser().request("GET", url).status == 200, 15,
               what="the added route after SIGHUP")
    assert "configuration reloaded (SIGHUP)" in gateway.logs()


def test_edit_of_the_mounted_config_is_watched(image: str, tmp_path: Path) -> None:
    """Without a signal: the gateway's file watch (polling, --poll-interval 0.2 here)
    sees a rename inside the mounted directory and serves the added route."""
    port = free_port()
    config: dict[str, Any] = {"insecure_server": True, "address": f"127.0.0.1:{port}",
                              "policy": []}
    etc = config_dir(tmp_path, config)
    with running(image, "--config", CONFIG_IN_IMAGE, "--poll-interval", "0.2",
                 options=("--read-only", "--volume", f"{etc}:/etc/gateway:ro")) as gateway:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/ping"), 30, what="/ping")
        url = f"http://added.localhost:{port}/"
        assert Browser().request("GET", url).status == 404
        config["policy"] = [{"from": f"http://added.localhost:{port}",
                             "to": "http://127.0.0.1:1",  # nothing listens: 503 once routed
                             "allow_public_unauthenticated_access": True}]
        write_config(etc, config)
        wait_until(lambda: Browser().request("GET", url).status == 503, 15,
                   what="the added route served after the edit")
        assert "configuration reloaded" in gateway.logs()


def test_sigterm_stops_in_order(image: str, tmp_path: Path) -> None:
    """podman stop (SIGTERM) ends the gateway through its orderly shutdown, exit status
    0, well before podman's SIGKILL; settings from the environment alone."""
    port = free_port()
    with running(image, options=("--read-only", "--env", "INSECURE_SERVER=true",
                                 "--env", f"ADDRESS=127.0.0.1:{port}")) as gateway:
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/ping"), 30, what="/ping")
        started = time.monotonic()
        podman("stop", "--time", "30", gateway.name, timeout=60)
        elapsed = time.monotonic() - started
        state = gateway.state()
        logs = gateway.logs()
    assert state["ExitCode"] == 0, logs[-3000:]
    assert elapsed < 10, f"stop took {elapsed:.1f}s"
    assert "databroker service stopping" in logs
    assert "Server Shut Down." in logs


def test_bad_config_is_refused_with_its_key(image: str, tmp_path: Path) -> None:
    """A route whose `from` has a path: the container exits 1 before serving, stderr
    naming policy[0].from."""
    etc = config_dir(tmp_path, {"insecure_server": True, "address": f"127.0.0.1:{free_port()}",
                                "policy": [{"from": "http://app.localhost/x",
                                            "to": "http://127.0.0.1:1",
                                            "allow_public_unauthenticated_access": True}]})
    name = f"gateway-test-{uuid.uuid4().hex[:10]}"
    result = run(*PODMAN, "run", "--rm", "--name", name, "--network", "host", "--read-only",
                 "--volume", f"{etc}:/etc/gateway:ro", image, check=False, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "policy[0].from" in result.stderr
    assert "contains a path" in result.stderr
    assert podman("container", "exists", name, check=False).returncode == 1


def test_compose_two_workers_with_redis(image: str, tmp_path: Path) -> None:
    """deploy/compose.yaml as shipped (its variables: images, port, config directory):
    two workers behind the published port, sessions in the Redis service. Run with
    podman-compose (Debian's), which creates the project's network and volume."""
    if shutil.which("podman-compose") is None:
        pytest.fail("podman-compose missing: scripts/setup-dev.sh installs it", pytrace=False)
    redis_image = container.build_redis_image()
    port = free_port()
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    etc = config_dir(tmp_path, {
        "insecure_server": True,
        "cookie_secure": False,
        "shared_secret": base64.b64encode(secrets.token_bytes(32)).decode(),
        "cookie_secret": base64.b64encode(secrets.token_bytes(32)).decode(),
        "signing_key_file": "signing-key.pem",
        "authenticate_service_url": f"http://authenticate.localhost:{port}",
        "idp_provider": "oidc",
        "idp_provider_url": "http://idp.localhost:9",
        "idp_client_id": "gateway",
        "idp_client_secret": "secret",
        "policy": [{"from": f"http://app.localhost:{port}", "to": "http://127.0.0.1:9",
                    "allow_any_authenticated_user": True}],
    })
    (etc / "signing-key.pem").write_bytes(pem)
    (etc / "signing-key.pem").chmod(0o644)
    project = f"gwtest{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, GATEWAY_IMAGE=image, REDIS_IMAGE=redis_image,
               GATEWAY_PORT=str(port), GATEWAY_CONFIG_DIR=str(etc),
               GATEWAY_HEALTHCHECK_URL="http://127.0.0.1:8443/ping")
    compose = ["podman-compose", "--podman-args", " ".join(PODMAN[1:]), "-p", project,
               "-f", str(container.COMPOSE_FILE)]
    gateway = Container(f"{project}_gateway_1")
    redis = Container(f"{project}_redis_1")
    try:
        debian.run(*compose, "up", "-d", env=env, timeout=300)
        wait_until(lambda: http_ok(f"http://127.0.0.1:{port}/ping"), 60,
                   what="the compose project's gateway on its published port")
        reply = Browser().request("GET", f"http://app.localhost:{port}/")
        assert reply.status == 302
        assert (reply.header("location") or "").startswith(
            f"http://authenticate.localhost:{port}/")
        logs = gateway.logs()
        assert '"worker": 0' in logs and '"worker": 1' in logs, logs[-3000:]
        # Both workers follow the databroker's change stream in Redis, over the project's
        # network (by the service's name): connections other than redis-cli's own.
        clients = redis.exec("redis-cli", "client", "list").stdout.splitlines()
        print("\n".join(clients))
        assert len([c for c in clients if "cmd=client" not in c]) >= 2, clients
        health = podman("healthcheck", "run", gateway.name, check=False)
        assert health.returncode == 0, health.stdout + health.stderr
    except BaseException:
        print(f"--- gateway ---\n{gateway.logs()[-6000:]}\n--- redis ---\n{redis.logs()[-2000:]}")
        raise
    finally:
        debian.run(*compose, "down", env=env, check=False, timeout=300)
        podman("volume", "rm", "--force", f"{project}_gateway-data", check=False)
        podman("network", "rm", "--force", f"{project}_default", check=False)
