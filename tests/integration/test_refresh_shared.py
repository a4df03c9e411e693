"""A session's token refresh happens once among the processes sharing the store.

``workers: 2`` over real Redis, and a provider that rotates refresh tokens with reuse
detection (node-oidc-provider ``rotateRefreshToken``: a used refresh token given again
is refused and the whole grant revoked). Requests of one session reach both workers at
once when its refresh is due: without a lease both workers refresh with the same token,
the second is refused and the person is signed out everywhere."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.test_workers import (
    EXAMPLE,
    make_secrets,
    moved,
    on_both_workers,
    redis_url,  # noqa: F401 (fixture)
    served_by,
)
from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.peers import echo_upstream, oidc_provider
from tests.support.processes import free_port, wait_until

pytestmark = pytest.mark.integration
ACCESS_TOKEN_TTL = 65
DUE = ACCESS_TOKEN_TTL - 60  # seconds after sign-in: sign_in.REFRESH_GRACE before expiry
BURST = 16


def test_two_workers_refresh_a_session_once(tmp_path: Path, redis_url: str,  # noqa: F811
                                            require_binary: Any) -> None:
    require_binary("node", "apt-get install -y nodejs npm")
    port, metrics = free_port(), free_port()
    make_secrets(tmp_path)
    with oidc_provider(tmp_path, [f"http://authenticate.localhost:{port}/oauth2/callback"],
                       access_token_ttl=ACCESS_TOKEN_TTL, rotate_refresh_tokens=True
                       ) as op, echo_upstream(tmp_path, quiet=True) as up:
        config = yaml.safe_load(moved(EXAMPLE.read_text(), {
            "workers: auto": "workers: 2",
            ":8080": f":{port}", "http://127.0.0.1:9000": op.issuer,
            "http://127.0.0.1:8081": up.url, "kvstore://127.0.0.1:6379/0": redis_url,
            "127.0.0.1:9090": f"127.0.0.1:{metrics}"}))
        with gateway_daemon(tmp_path, config, port=port) as daemon:
            browser = Browser()
            before = time.monotonic()
            assert browser.sign_in(f"http://localhost:{port}/", "alice@example.test").status \
                == 200
            url = f"http://localhost:{port}/x"
            # both workers have read the session before its refresh is due
            assert set(on_both_workers(daemon, lambda: browser.request("GET", url).status)
                       ) == {200}
            assert "REFRESH GRANTED" not in op.process.log_text()
            time.sleep(max(before + DUE + 1.0 - time.monotonic(), 0.0))

            mark = len(daemon.log_events())
            with ThreadPoolExecutor(BURST) as pool:  # a new connection each, at once
                statuses = list(pool.map(lambda _: browser.request("GET", url).status,
                                         range(BURST)))
            assert set(statuses) == {200}, statuses
            wait_until(lambda: len(served_by(daemon, mark)) >= BURST, 5, what="access log")
            assert set(served_by(daemon, mark)) == {0, 1}, "the burst reached one worker"

            provider_log = op.process.log_text()
            assert provider_log.count("REFRESH GRANTED") == 1, provider_log[-2000:]
            assert "refresh token already used" not in provider_log
            refreshed = [e for e in daemon.log_events()
                         if str(e.get("log_format", e.get("message", ""))).startswith(
                             "refreshed the tokens")]
            assert len(refreshed) == 1, refreshed
            assert not daemon.logged("failed, session ended")
            # both workers go on with the new tokens: no further refresh, still signed in
            assert set(on_both_workers(daemon, lambda: browser.request("GET", url).status)
                       ) == {200}
            assert op.process.log_text().count("REFRESH GRANTED") == 1
