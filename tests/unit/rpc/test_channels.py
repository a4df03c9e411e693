"""Service URLs as gRPC dials them, and the channel and server options the settings
turn into."""

from __future__ import annotations

import pytest

from gateway.rpc.channels import client_options, listen_address, parse_service_url, server_options


def test_service_urls() -> None:
    assert parse_service_url("http://127.0.0.1:5443").address == "127.0.0.1:5443"
    assert not parse_service_url("http://127.0.0.1:5443").secure
    secure = parse_service_url("https://databroker.internal")
    assert (secure.address, secure.secure) == ("databroker.internal:443", True)
    assert parse_service_url("http://[::1]:5443").address == "[::1]:5443"
    for bad in ("127.0.0.1:5443", "grpc://x:1", "http://"):
        with pytest.raises(ValueError):
            parse_service_url(bad)


def test_listen_address() -> None:
    assert listen_address(":5443") == "[::]:5443"
    assert listen_address("127.0.0.1:5443") == "127.0.0.1:5443"


def test_client_options_follow_the_settings() -> None:
    default = dict(client_options())
    assert default["grpc.lb_policy_name"] == "round_robin"
    assert default["grpc.max_reconnect_backoff_ms"] <= 2000
    assert "grpc.ssl_target_name_override" not in default
    named = dict(client_options("databroker.internal", round_robin=False))
    assert named["grpc.ssl_target_name_override"] == "databroker.internal"
    assert "grpc.lb_policy_name" not in named


def test_server_options() -> None:
    options = dict(server_options(300.0, 60.0))
    assert options["grpc.max_connection_age_ms"] == 300_000
    assert options["grpc.max_connection_age_grace_ms"] == 60_000
    assert options["grpc.so_reuseport"] == 0


def test_only_an_unreachable_service_is_worth_another_round() -> None:
    import grpc

    from gateway.rpc.failover import is_transient

    assert is_transient(grpc.StatusCode.UNAVAILABLE, "connections to all backends failing; "
                        "last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused")
    for details in ("...: Tls handshake failed (TSI_PROTOCOL_FAILURE): ...",
                    "...: Custom verification check failed with error: UNAUTHENTICATED: "
                    "Hostname Verification Check failed."):
        assert not is_transient(grpc.StatusCode.UNAVAILABLE, details)
    assert not is_transient(grpc.StatusCode.UNAUTHENTICATED, "shared_secret differs")
