"""The pure parts of the cluster client: key slots (vectors from a real redis-server's
``CLUSTER KEYSLOT``), the keys of a command, redirect and ``CLUSTER SLOTS`` replies."""

from __future__ import annotations

import pytest
import txredisapi

from gateway.databroker.cluster_slots import (
    SLOTS,
    CrossSlotError,
    SlotRedirect,
    backoff,
    command_keys,
    command_slot,
    crc16,
    key_slot,
    parse_slot_redirect,
    slot_owners,
)

# key -> CLUSTER KEYSLOT of Redis 7.0.15
VECTORS = {
    b"123456789": 12739, b"foo": 12182, b"bar": 5061, b"hello": 866,
    b"{user1000}.following": 3443, b"{user1000}.followers": 3443, b"user1000": 3443,
    b"foo{}{bar}": 8363, b"foo{{bar}}zap": 4015, b"foo{bar}{zap}": 5061, b"{}foo": 9500,
    b"{gateway}:session": 3020, b"gateway": 3020, b"{": 4092, b"}{x}": 16287,
    b"\xff\x00\x80": 7915, b"a{b": 13340, b"a}b{c}": 7365,
    "ключ".encode(): 10303,
}


def test_crc16_xmodem_check_value() -> None:
    assert crc16(b"123456789") == 0x31C3
    assert crc16(b"") == 0


@pytest.mark.parametrize(("key", "slot"), VECTORS.items())
def test_key_slot_matches_redis(key: bytes, slot: int) -> None:
    assert key_slot(key) == slot


def test_key_slot_takes_text_and_numbers_as_sent() -> None:
    assert key_slot("ключ") == 10303
    assert key_slot(42) == key_slot(b"42")
    assert key_slot(1.5) == key_slot(b"1.500000")  # txredisapi's float format


def test_hash_tags() -> None:
    # only the first {, the first } after it, and only when something is between
    assert key_slot("{gateway}:a") == key_slot("{gateway}:b") == key_slot("gateway")
    assert key_slot("x{gateway}y{other}") == key_slot("gateway")
    assert key_slot("{}gateway") != key_slot("gateway")
    assert key_slot("{{gateway}}") == key_slot("{gateway")


def test_keys_of_ordinary_commands() -> None:
    for name in ("GET", "SET", "INCR", "HGET", "HSET", "HDEL", "HGETALL", "HMGET",
                 "HSCAN", "ZADD", "ZREM", "ZRANGEBYSCORE", "ZCARD", "EXPIRE", "PEXPIRE"):
        assert command_keys([name, "k", "1", "2"]) == [b"k"], name
    assert command_keys(["get", b"k"]) == [b"k"]  # any case, bytes or text
    assert command_slot(["SET", "foo", "1"]) == 12182


def test_keyless_commands_have_no_slot() -> None:
    for args in (["PING"], ["SCRIPT", "LOAD", "return 1"], ["INFO", "server"],
                 ["CLUSTER", "SLOTS"], ["EVAL", "return 1", "0"]):
        assert command_keys(args) == []
        assert command_slot(args) is None


def test_multi_key_commands() -> None:
    assert command_keys(["DEL", "a", "b"]) == [b"a", b"b"]
    assert command_keys(["MSET", "a", "1", "b", "2"]) == [b"a", b"b"]
    assert command_slot(["EXISTS", "{t}1", "{t}2"]) == key_slot("t")
    with pytest.raises(CrossSlotError):
        command_slot(["MGET", "foo", "bar"])


def test_eval_keys_are_after_numkeys() -> None:
    args: list[str | int] = ["EVAL", "return 1", 2, "{gateway}:a", "{gateway}:b", "argv-not-a-key"]
    assert command_keys(args) == [b"{gateway}:a", b"{gateway}:b"]
    assert command_slot(args) == key_slot("gateway")
    assert command_keys(["EVALSHA", "abc", "1", "k", "v"]) == [b"k"]
    assert command_keys(["EVAL", "return 1", "x"]) == []  # Redis will refuse it itself


def test_cross_slot_eval_is_refused_naming_the_keys() -> None:
    with pytest.raises(CrossSlotError) as raised:
        command_slot(["EVAL", "return 1", 2, "foo", "bar", "arg"])
    message = str(raised.value)
    assert message.startswith("CROSSSLOT")
    assert "'foo' (slot 12182)" in message and "'bar' (slot 5061)" in message
    assert "arg" not in message
    assert isinstance(raised.value, txredisapi.ResponseError)


def test_parse_redirects() -> None:
    assert parse_slot_redirect("MOVED 12182 127.0.0.1:51455") == SlotRedirect(
        "MOVED", 12182, "127.0.0.1", 51455)
    assert parse_slot_redirect("ASK 3020 127.0.0.1:7001") == SlotRedirect(
        "ASK", 3020, "127.0.0.1", 7001)
    assert parse_slot_redirect("MOVED 1 ::1:7000") == SlotRedirect("MOVED", 1, "::1", 7000)
    # an unknown endpoint
    assert parse_slot_redirect("MOVED 1 :7000") == SlotRedirect("MOVED", 1, "", 7000)
    for other in ("WRONGTYPE Operation against a key", "MOVED 99999 h:1", "MOVED x h:1",
                  "ASK 1 nohost", "TRYAGAIN Multiple keys request during rehashing", ""):
        assert parse_slot_redirect(other) is None, other


def test_slot_owners_from_cluster_slots() -> None:
    reply = [
        [0, 5460, ["127.0.0.1", 7000, "id0"], ["127.0.0.1", 7003, "id3"]],
        [5461, 10922, [b"", 7001, b"id1"]],  # empty host: the asked node's
        [10923, 16383, ["?", 7002]],
        ["bad"], [1, 0, ["x", 1]],
    ]
    owners = slot_owners(reply, "10.0.0.9")
    assert len(owners) == SLOTS
    assert owners[0] == owners[5460] == ("127.0.0.1", 7000)
    assert owners[5461] == owners[10922] == ("10.0.0.9", 7001)
    assert owners[16383] == ("10.0.0.9", 7002)
    assert slot_owners("ERR not a list", "h") == [None] * SLOTS


def test_backoff_is_short_and_bounded() -> None:
    assert backoff(1) == pytest.approx(0.02)
    assert backoff(2) == pytest.approx(0.04)
    assert backoff(100) == pytest.approx(0.25)
