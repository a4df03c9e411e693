"""Shared pytest fixtures for the whole test suite.

Sections (add new shared fixtures to the matching section, or start a new one):

1. Import path       - the repository root is on sys.path (pyproject: pythonpath).
2. Environment       - CI detection, external-binary requirement (skip locally, fail in CI).
3. Peer processes    - real echo upstream / redis-server / oidc-provider on loopback.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.support import peers, stage_check

REPO_ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------
# 2. Environment
# --------------------------------------------------------------------------

# A suite started in the background by a non-interactive shell (`scripts/test.sh &`, a
# CI step, nohup) inherits SIGINT *ignored*, and so would every process it starts: the
# tests that press Ctrl-C on `gateway tcp` would then wait for a process that cannot
# hear it. A Python handler here is reset to the default by exec, so children get a
# normal SIGINT (and the run itself can be interrupted).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def exchange_stage_rules() -> Iterator[None]:
    """Every exchange a test drives in process moves only as ``stage.NEXT`` allows."""
    stage_check.install()
    stage_check.take()
    yield
    moves = stage_check.take()
    assert not moves, f"exchanges made moves stage.NEXT does not list: {moves}"


def in_ci() -> bool:
    """True when the CI environment variable is set (to anything but empty/0/false/no)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _require_binary(name: str, hint: str) -> str:
    """Path of external program ``name``. If it is missing: skip the test locally, but
    fail it when CI is set (a CI machine must have every peer installed)."""
    path = peers.find_binary(name)
    if path is not None:
        return path
    message = f"{name} is not installed (install: {hint})"
    if in_ci():
        pytest.fail(f"{message}; CI is set, so missing peers fail instead of skipping",
                    pytrace=False)
    pytest.skip(message)


@pytest.fixture
def require_binary() -> Callable[[str, str], str]:
    """``require_binary(name, install_hint)`` inside a test: path of the program, or
    skip (locally) / fail (CI set) when it is missing."""
    return _require_binary


# --------------------------------------------------------------------------
# 3. Peer processes (function-scoped; each test gets fresh processes that are
#    stopped by PID at teardown, also when the test fails)
# --------------------------------------------------------------------------


@pytest.fixture
def echo_upstream(tmp_path: Path) -> Iterator[peers.Upstream]:
    """A running echo upstream named ``upstream`` (see tests/peers/echo_upstream.py)."""
    with peers.echo_upstream(tmp_path / "echo-upstream", name="upstream") as upstream:
        yield upstream


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[peers.Redis]:
    """A running redis-server without password and without persistence."""
    _require_binary("redis-server", peers.REDIS_INSTALL_HINT)
    with peers.redis_server(tmp_path / "redis") as redis:
        yield redis


@pytest.fixture
def oidc_provider(tmp_path: Path) -> Iterator[peers.OIDCProvider]:
    """A running node-oidc-provider; client ``gateway``/``secret``, redirect URI
    ``http://127.0.0.1/oauth2/callback``, dev interactions (any login accepted)."""
    _require_binary("node", peers.NODE_INSTALL_HINT)
    with peers.oidc_provider(tmp_path / "oidc") as provider:
        yield provider


@pytest.fixture
def peer_factory(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Start extra or customised peers inside a test; all are stopped at teardown.

    ``peer_factory(peers.redis_server, password="pw")``,
    ``peer_factory(peers.echo_upstream, name="b")``,
    ``peer_factory(peers.oidc_provider, redirect_uris=[...])``.
    The first argument is one of the context-manager factories of tests.support.peers;
    it gets its own log directory under ``tmp_path``.
    """
    binaries = {
        peers.redis_server: ("redis-server", peers.REDIS_INSTALL_HINT),
        peers.oidc_provider: ("node", peers.NODE_INSTALL_HINT),
    }
    counter = iter(range(1, 10_000))
    with ExitStack() as stack:

        def start(factory: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            if factory in binaries:
                _require_binary(*binaries[factory])
            name = getattr(factory, "__name__", "peer")
            log_dir = tmp_path / f"{name}-{next(counter)}"
            return stack.enter_context(factory(log_dir, *args, **kwargs))

        yield start

