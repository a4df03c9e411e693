"""Sessions in a real 3-master Redis Cluster (``kvstore+cluster://``): two gateway processes
share them while the slot holding them migrates to another master under traffic, and a
sign-out in one process ends the session in the other."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.databroker.cluster_slots import key_slot
from tests.support.browser import Browser
from tests.support.daemon import gateway_daemon
from tests.support.kvcluster import redis_cluster
from tests.support.kvstore import kv_gateway_config as config
from tests.support.peers import echo_upstream, oidc_provider
from tests.support.processes import free_port

pytestmark = pytest.mark.integration


def test_sessions_follow_a_slot_migration(tmp_path: Path, require_binary: Any) -> None:
    require_binary("redis-server", "apt-get install -y redis-server")
    require_binary("node", "apt-get install -y nodejs npm")
    pa, pb = free_port(), free_port()
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    with redis_cluster(tmp_path, username="gw", password="cluster-pw") as cluster, \
            oidc_provider(tmp_path, [f"http://auth.test:{pa}/oauth2/callback",
                                     f"http://auth.test:{pb}/oauth2/callback"]) as op, \
            echo_upstream(tmp_path) as up:
        seeds = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes[:2])
        url = f"kvstore+cluster://gw:cluster-pw@{seeds}/"
        browser = Browser()
        with gateway_daemon(a_dir, config(op, url, pa, up.url), port=pa), \
                gateway_daemon(b_dir, config(op, url, pb, up.url), port=pb):
            assert browser.sign_in(f"http://app.test:{pa}/", "alice@example.test").status \
                == 200
            assert browser.request("GET", f"http://app.test:{pb}/").status == 200
            slot = key_slot("{gateway}")
            source = cluster.owner(slot)
            assert cluster.command(source, "HLEN", "{gateway}:records:session") == 1
            destination = next(n for n in cluster.masters() if n is not source)
            mover = threading.Thread(target=cluster.migrate_slot, args=(slot, destination),
                                     kwargs={"pause": 0.05, "batch": 1})
            statuses: list[int] = []
            mover.start()
            started = time.monotonic()
            # traffic on both processes while the slot moves (bounded in count and time)
            while (mover.is_alive() or len(statuses) < 40) and len(statuses) < 2000 \
                    and time.monotonic() - started < 30:
                port = pa if len(statuses) % 2 else pb
                statuses.append(browser.request("GET", f"http://app.test:{port}/t").status)
            mover.join(30)
            assert not mover.is_alive()
            assert cluster.owner(slot) is destination
            assert set(statuses) == {200}, statuses
            # a new sign-in after the move is written to the new owner
            other = Browser()
            assert other.sign_in(f"http://app.test:{pb}/", "alice@example.test").status \
                == 200
            assert cluster.command(destination, "HLEN", "{gateway}:records:session") == 2
            # sign-out in A ends the session in B within a poll or two
            browser.sign_out(f"http://app.test:{pa}")
            ended = time.monotonic()
            while browser.request("GET", f"http://app.test:{pb}/z").status == 200:
                assert time.monotonic() - ended < 1.5, "sign-out not seen in 1.5 s"
                time.sleep(0.05)
        logged = (a_dir / "gateway.log").read_text() + (b_dir / "gateway.log").read_text()
        assert "session storage unavailable" not in logged
