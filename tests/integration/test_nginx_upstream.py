"""nginx as the upstream: keep-alive reuse, HEAD and 204 framing, a larger file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import gateway_daemon
from tests.support.nginx import NGINX_HINT, nginx_upstream
from tests.support.rawhttp import RawClient

pytestmark = pytest.mark.integration


def test_nginx_upstream(tmp_path: Path, require_binary: Any) -> None:
    """Requests reuse one nginx connection; HEAD (with Content-Length) and 204 do not
    leave a body pending on the pooled connection; 4 MiB arrives intact."""
    require_binary("nginx", NGINX_HINT)
    with nginx_upstream(tmp_path) as up, gateway_daemon(tmp_path, {"policy": [{
            "from": "https://app.test", "to": up.url,
            "allow_public_unauthenticated_access": True}]}) as gw, \
            RawClient(gw.port) as client:
        connections = set()
        for method, path, status, length in (("GET", "/", 200, 2048), ("HEAD", "/", 200, 0),
                                             ("GET", "/empty", 204, 0), ("GET", "/", 200, 2048),
                                             ("HEAD", "/big", 200, 0),
                                             ("GET", "/big", 200, 4 << 20)):
            reply = client.request(method, path, "app.test")
            assert (reply.status, len(reply.body)) == (status, length), (method, path)
            connections.add(reply.headers["x-connection"])
        assert len(connections) == 1
        big = client.request("GET", "/big", "app.test").body
        assert big == bytes(range(256)) * (4 << 12)
