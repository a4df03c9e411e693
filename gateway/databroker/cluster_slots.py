"""The pure parts of the Redis Cluster client: key slots (CRC16 with hash tags), the keys
of a command, ``MOVED``/``ASK`` replies, ``CLUSTER SLOTS`` replies, retry backoff."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import txredisapi

SLOTS = 16384
#: Backoff between retries: doubles from the first value up to the second.
BACKOFF = (0.02, 0.25)

Address = tuple[str, int]
Arg = str | bytes | int | float


class CrossSlotError(txredisapi.ResponseError):  # type: ignore[misc]
    """The keys of one command live in different slots (refused before sending)."""


def _crc16_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = (crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_CRC16 = _crc16_table()


def crc16(data: bytes) -> int:
    """CRC16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster uses it."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[(crc >> 8) ^ byte]
    return crc


def as_bytes(arg: Arg) -> bytes:
    """An argument as txredisapi puts it on the wire."""
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, float):
        return format(arg, "f").encode()
    return str(arg).encode()


def key_slot(key: Arg) -> int:
    """The cluster slot of ``key``; only the ``{hash tag}`` counts when it has a non-empty one."""
    raw = as_bytes(key)
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1:end]
    return crc16(raw) % SLOTS


_KEYLESS = frozenset({
    "ASKING", "AUTH", "CLIENT", "CLUSTER", "COMMAND", "CONFIG", "DBSIZE", "ECHO",
    "FLUSHALL", "FLUSHDB", "FUNCTION", "HELLO", "INFO", "KEYS", "LASTSAVE", "PING",
    "PUBLISH", "RANDOMKEY", "READONLY", "READWRITE", "ROLE", "SCAN", "SCRIPT", "SELECT",
    "SLOWLOG", "TIME", "WAIT",
})
_ALL_KEYS = frozenset({"DEL", "EXISTS", "MGET", "PFCOUNT", "SDIFF", "SINTER", "SUNION",
                       "TOUCH", "UNLINK", "WATCH"})
_KEY_VALUE_PAIRS = frozenset({"MSET", "MSETNX"})
_SCRIPTS = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})


def command_keys(args: Sequence[Arg]) -> list[bytes]:
    """The keys of a command: ``args[1]`` for ordinary key commands, every key of
    multi-key ones, ``args[3:3+numkeys]`` for scripts; none for keyless commands."""
    if not args:
        raise ValueError("empty command")
    name = as_bytes(args[0]).decode("ascii", "replace").upper()
    if name in _KEYLESS:
        return []
    if name in _SCRIPTS:
        if len(args) < 3:
            return []
        try:
            numkeys = int(as_bytes(args[2]))
        except ValueError:
            return []  # Redis refuses it with its own error
        return [as_bytes(a) for a in args[3:3 + max(numkeys, 0)]]
    if name in _ALL_KEYS:
        return [as_bytes(a) for a in args[1:]]
    if name in _KEY_VALUE_PAIRS:
        return [as_bytes(a) for a in args[1::2]]
    return [as_bytes(args[1])] if len(args) > 1 else []


def command_slot(args: Sequence[Arg]) -> int | None:
    """The slot a command goes to, None for keyless ones (any node answers them).

    Raises :class:`CrossSlotError` naming the keys when they hash to different slots,
    as Redis would with ``CROSSSLOT``, without a round trip."""
    keys = command_keys(args)
    slots = {key: key_slot(key) for key in keys}
    if len(set(slots.values())) > 1:
        named = ", ".join(f"{key.decode(errors='replace')!r} (slot {slot})"
                          for key, slot in slots.items())
        raise CrossSlotError(
            f"CROSSSLOT keys of {as_bytes(args[0]).decode(errors='replace').upper()} hash to "
            f"different slots: {named}; give them one {{hash tag}}")
    return next(iter(slots.values()), None)


@dataclass(frozen=True)
class SlotRedirect:
    kind: str  # MOVED or ASK
    slot: int
    host: str  # "" when the node does not know its endpoint: the replying node's host
    port: int


def parse_slot_redirect(message: str) -> SlotRedirect | None:
    """``MOVED 3999 127.0.0.1:6381`` / ``ASK ...`` error text, or None for other errors."""
    parts = message.split()
    if len(parts) != 3 or parts[0] not in ("MOVED", "ASK") or not parts[1].isdigit():
        return None
    host, colon, port = parts[2].rpartition(":")
    slot = int(parts[1])
    if not colon or not port.isdigit() or slot >= SLOTS:
        return None
    return SlotRedirect(parts[0], slot, host.strip("[]"), int(port))


def slot_owners(reply: Any, asked_host: str) -> list[Address | None]:
    """The master of every slot from a ``CLUSTER SLOTS`` reply (entries
    ``[start, end, [host, port, id, ...], replicas...]``); an empty or ``?`` host means
    the host of the node that was asked. Malformed entries are skipped."""
    owners: list[Address | None] = [None] * SLOTS
    for entry in reply if isinstance(reply, list) else ():
        try:
            start, end, master = int(entry[0]), int(entry[1]), entry[2]
            host = master[0].decode() if isinstance(master[0], bytes) else str(master[0])
            port = int(master[1])
        except (TypeError, ValueError, IndexError, UnicodeDecodeError):
            continue
        if host in ("", "?"):
            host = asked_host
        if 0 <= start <= end < SLOTS:
            owners[start:end + 1] = [(host, port)] * (end - start + 1)
    return owners


def backoff(attempt: int) -> float:
    first, most = BACKOFF
    return float(min(most, first * 2 ** min(attempt - 1, 16)))
