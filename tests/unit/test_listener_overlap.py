"""``workers`` > 1: two settings naming one port are refused before anything binds
(with ``SO_REUSEPORT`` the second bind would succeed and the kernel would spread one
port's connections over the HTTP and the SSH listeners)."""

from __future__ import annotations

import pytest

from gateway.workers.supervisor import SharedListeners, overlapping


@pytest.mark.parametrize(("addresses", "clash"), [
    (["127.0.0.1:8443", "127.0.0.1:2222"], None),
    (["127.0.0.1:8443", "127.0.0.2:8443"], None),
    (["127.0.0.1:8443", "127.0.0.1:8443"], ("127.0.0.1:8443", "127.0.0.1:8443")),
    ([":443", "127.0.0.1:443"], (":443", "127.0.0.1:443")),
    (["127.0.0.1:443", "0.0.0.0:443"], ("127.0.0.1:443", "0.0.0.0:443")),
    (["[::1]:22", "[::]:22"], ("[::1]:22", "[::]:22")),
    (["127.0.0.1:0", "127.0.0.1:0"], None),  # (each its own ephemeral port)
])
def test_overlapping(addresses: list[str], clash: tuple[str, str] | None) -> None:
    assert overlapping(addresses) == clash


def test_bind_refuses_one_port_twice_and_binds_nothing() -> None:
    listeners = SharedListeners(["127.0.0.1:0", ":8443", "127.0.0.1:8443"], 2)
    with pytest.raises(ValueError, match=r":8443 and 127\.0\.0\.1:8443 are the same port"):
        listeners.bind()
    assert listeners.sockets == {}
