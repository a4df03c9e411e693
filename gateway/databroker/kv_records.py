"""Records in kvstore (Redis): standalone, sentinel or cluster, plain or TLS.

Layout, every key under the hash tag ``{gateway}`` so that a cluster keeps them in one
slot and each change stays one atomic script:

- ``{gateway}:records:<type>``: hash of id -> ``version|modified|deleted|expires|blob``,
  where blob is the record's data sealed with the key derived from ``shared_secret``
  (``RecordCipher``, bound to type and id) in base64; a tombstone has no blob.
- ``{gateway}:version``: the counter every change increments.
- ``{gateway}:changes``: sorted set of ``type/id`` by the version of its last change,
  which ``sync`` reads from a version on.
- ``{gateway}:expiry`` / ``{gateway}:tombstones``: when records expire and when
  tombstones were made, for ``sweep``; ``{gateway}:purged``: the newest version
  swept away (a reader older than that must start over); ``{gateway}:epoch``: set once,
  so a reader notices a store that was emptied.

Values are text because txredisapi's sentinel connections only work with its default
(decoded) replies.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Callable
from typing import Any

import txredisapi
from twisted.internet import defer
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger
from twisted.python.failure import Failure

from gateway.databroker.cipher import RecordCipher, RecordKeyError
from gateway.databroker.records import (
    SYNC_BATCH,
    TOMBSTONE_SECONDS,
    TYPES,
    Changes,
    Record,
    StorageUnavailable,
)
from gateway.observability.metrics import STORAGE_OPERATION_DURATION_MS
from gateway.observability.tracing.active import start_child

log = Logger()

PREFIX = "{gateway}:"
RECORDS = PREFIX + "records:"
VERSION, CHANGES, EXPIRY = PREFIX + "version", PREFIX + "changes", PREFIX + "expiry"
TOMBSTONES, PURGED, EPOCH = PREFIX + "tombstones", PREFIX + "purged", PREFIX + "epoch"
LEASE = PREFIX + "lease:"
HASHES = [RECORDS + t for t in TYPES]  # declared to Redis (cluster slot checks)
SWEEP_BATCH = 1000
SWEEP_ROUNDS = 20

PUT = """
if ARGV[7] == '0' then
  local old = redis.call('HGET', KEYS[1], ARGV[2])
  if old and string.match(old, '^[^|]*|[^|]*|([^|]*)') ~= '0' then return 0 end
end
local v = redis.call('INCR', KEYS[2])
redis.call('SETNX', KEYS[6], ARGV[6])
redis.call('HSET', KEYS[1], ARGV[2], v .. '|' .. ARGV[3] .. '|0|' .. ARGV[4] .. '|' .. ARGV[5])
redis.call('ZADD', KEYS[3], v, ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
if tonumber(ARGV[4]) > 0 then redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
else redis.call('ZREM', KEYS[4], ARGV[1]) end
return v
"""

DELETE = """
local old = redis.call('HGET', KEYS[1], ARGV[2])
if not old or string.match(old, '^[^|]*|[^|]*|([^|]*)') ~= '0' then return 0 end
local v = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], ARGV[2], v .. '|' .. ARGV[3] .. '|' .. ARGV[3] .. '|0|')
redis.call('ZADD', KEYS[3], v, ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[3], ARGV[1])
return v
"""

SYNC = """
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local purged = tonumber(redis.call('GET', KEYS[3]) or '0')
local epoch = redis.call('GET', KEYS[4]) or ''
local since = tonumber(ARGV[1])
if since < purged or since > v then return {tostring(v), epoch, 1, 0} end
local limit = tonumber(ARGV[2])
local items = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES',
                         'LIMIT', 0, limit)
local out = {tostring(v), epoch, 0, 0}
if #items / 2 >= limit then out[1] = items[#items]; out[4] = 1 end
for i = 1, #items, 2 do
  local t, id = string.match(items[i], '^([^/]*)/(.*)$')
  table.insert(out, items[i])
  table.insert(out, redis.call('HGET', ARGV[3] .. t, id) or '')
end
return out
"""

SWEEP = """
local n = 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[4])
for _, member in ipairs(expired) do
  local t, id = string.match(member, '^([^/]*)/(.*)$')
  local v = redis.call('INCR', KEYS[3])
  redis.call('HSET', ARGV[3] .. t, id, v .. '|' .. ARGV[1] .. '|' .. ARGV[1] .. '|0|')
  redis.call('ZADD', KEYS[4], v, member)
  redis.call('ZREM', KEYS[1], member)
  redis.call('ZADD', KEYS[2], ARGV[1], member)
  n = n + 1
end
local purged = tonumber(redis.call('GET', KEYS[5]) or '0')
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[2], 'LIMIT', 0, ARGV[4])
for _, member in ipairs(old) do
  local t, id = string.match(member, '^([^/]*)/(.*)$')
  local value = redis.call('HGET', ARGV[3] .. t, id)
  if value and string.match(value, '^[^|]*|[^|]*|([^|]*)') ~= '0' then
    local v = tonumber(string.match(value, '^([^|]*)'))
    if v > purged then purged = v end
    redis.call('HDEL', ARGV[3] .. t, id)
    redis.call('ZREM', KEYS[4], member)
    n = n + 1
  end
  redis.call('ZREM', KEYS[2], member)
end
redis.call('SET', KEYS[5], purged)
return n
"""

LEASE_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2]); return 1
end
return 0
"""

RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


def parse_value(type: str, id: str, value: str) -> tuple[Record, str]:
    """A stored value as a record without data, and its sealed blob (base64)."""
    version, modified, deleted, expires, blob = value.split("|", 4)
    return Record(type, id, b"", int(version), float(modified), float(deleted),
                  float(expires)), blob


class KVRecordStore:
    backend = "kvstore"

    def __init__(self, reactor: Any, redis: Any, cipher: RecordCipher,
                 reply_timeout: float = 3.0, service: str = "gateway",
                 disconnect: Callable[[], Any] | None = None) -> None:
        """``redis``: anything with txredisapi's ``execute_command`` (a pool, a
        sentinel's master, the cluster client)."""
        self.clock = reactor
        self.redis = redis
        self.cipher = cipher
        self.reply_timeout = reply_timeout
        self.service = service
        self.epoch = os.urandom(8).hex()
        self._sha = {script: hashlib.sha1(script.encode()).hexdigest()
                     for script in (PUT, DELETE, SYNC, SWEEP, LEASE_SCRIPT,
                                   RELEASE_SCRIPT)}

    # -- plumbing

    def _run(self, operation: str, command: Callable[[], Deferred[Any]]) -> Deferred[Any]:
        """One operation: timed into ``storage_operation_duration_ms``, bounded by the
        reply timeout (a lazy pool queues commands while Redis is away; nobody may wait
        on that), failures turned into ``StorageUnavailable``."""
        started = time.monotonic()
        span = start_child(f"kvstore {operation}", {"db.system": "redis",
                                                   "db.operation.name": operation})
        d = ensureDeferred(_call(command))
        d.addTimeout(self.reply_timeout, self.clock)

        def observe(result: object) -> object:
            failed = isinstance(result, Failure)
            STORAGE_OPERATION_DURATION_MS.labels(
                operation, "error" if failed else "ok", "kvstore",
                self.service).observe((time.monotonic() - started) * 1000)
            if span is not None:
                span.end(result.getErrorMessage() if isinstance(result, Failure) else None)
            return result

        def explain(failure: Failure) -> Failure:
            if failure.check(defer.TimeoutError, defer.CancelledError):
                reason = f"no answer within {self.reply_timeout:g}s"
            elif failure.check(txredisapi.ConnectionError, ConnectionError):
                reason = failure.getErrorMessage() or "connection lost"
            elif failure.check(txredisapi.ResponseError):
                reason = f"the server refused {operation}: {failure.getErrorMessage()}"
            else:
                return failure
            raise StorageUnavailable(
                f"kvstore unavailable ({reason}): is it up, and are the credentials in "
                "databroker_storage_connection_string and the databroker_storage_* TLS "
                "settings right? Connection errors are logged above")
        d.addBoth(observe)
        d.addErrback(explain)
        return d

    async def _script(self, script: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return await self.redis.execute_command(
                "EVALSHA", self._sha[script], len(keys), *keys, *args)
        except txredisapi.ResponseError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
            return await self.redis.execute_command("EVAL", script, len(keys), *keys, *args)

    def _open(self, type: str, id: str, value: str) -> Record:
        record, blob = parse_value(type, id, value)
        if record.deleted:
            return record
        data = self.cipher.open(type, id, base64.b64decode(blob))
        return Record(type, id, data, record.version, record.modified_at,
                      expires_at=record.expires_at)

    def _open_or_drop(self, type: str, id: str, value: str) -> Record:
        """A record for the change stream or a query: one that cannot be read (another
        shared_secret, damage) counts as deleted, so it stops nobody else's changes and
        no process trusts a copy of it."""
        try:
            return self._open(type, id, value)
        except (RecordKeyError, ValueError) as exc:
            log.error("databroker: skipping unreadable {type} record {id}: {error}",
                      type=type, id=id, error=str(exc))
            version = value.split("|", 1)[0]
            return Record(type, id, b"", int(version) if version.isdigit() else 0,
                          0.0, deleted_at=1.0)

    # -- RecordStore

    def get(self, type: str, id: str) -> Deferred[Record | None]:
        def done(value: Any) -> Record | None:
            if not value:
                return None
            record = self._open(type, id, _text(value))
            return None if record.deleted else record
        return self._run("get", lambda: self.redis.execute_command(
            "HGET", RECORDS + type, id)).addCallback(done)

    def put(self, type: str, id: str, data: bytes, expires_at: float = 0.0,
            revive: bool = True) -> Deferred[Record | None]:
        now = self.clock.seconds()
        blob = base64.b64encode(self.cipher.seal(type, id, data)).decode("ascii")
        member = f"{type}/{id}"

        def run() -> Deferred[Any]:
            return ensureDeferred(self._script(
                PUT, [RECORDS + type, VERSION, CHANGES, EXPIRY, TOMBSTONES, EPOCH],
                [member, id, repr(now), repr(expires_at), blob, self.epoch,
                 "1" if revive else "0"]))
        return self._run("put", run).addCallback(
            lambda version: Record(type, id, data, int(version), now, expires_at=expires_at)
            if int(version) else None)

    def delete(self, type: str, id: str) -> Deferred[None]:
        now = self.clock.seconds()

        def run() -> Deferred[Any]:
            return ensureDeferred(self._script(
                DELETE, [RECORDS + type, VERSION, CHANGES, EXPIRY, TOMBSTONES],
                [f"{type}/{id}", id, repr(now)]))
        return self._run("delete", run).addCallback(lambda _: None)

    def query(self, type: str) -> Deferred[list[Record]]:
        def done(values: Any) -> list[Record]:
            pairs = zip(values[::2], values[1::2], strict=True)  # HGETALL: flat list
            records = (self._open_or_drop(type, _text(k), _text(v)) for k, v in pairs)
            return [r for r in records if not r.deleted]
        return self._run("query", lambda: self.redis.execute_command(
            "HGETALL", RECORDS + type)).addCallback(done)

    def sync(self, since: int) -> Deferred[Changes]:
        def done(reply: list[Any]) -> Changes:
            version, epoch, reset, more = (int(_text(reply[0])), _text(reply[1]),
                                           bool(reply[2]), bool(reply[3]))
            records = []
            for member, value in zip(reply[4::2], reply[5::2], strict=True):
                type, _, id = _text(member).partition("/")
                if value:  # empty: swept away since
                    records.append(self._open_or_drop(type, id, _text(value)))
            return Changes(tuple(records), version, reset=reset, more=more, epoch=epoch)

        def run() -> Deferred[Any]:
            return ensureDeferred(self._script(
                SYNC, [VERSION, CHANGES, PURGED, EPOCH, *HASHES], [since, SYNC_BATCH, RECORDS]))
        return self._run("sync", run).addCallback(done)

    def sweep(self, now: float) -> Deferred[int]:
        """Expire and purge in rounds of ``SWEEP_BATCH`` (one script must stay short:
        Redis runs nothing else meanwhile) until a round finds less to do."""
        def run() -> Deferred[Any]:
            return ensureDeferred(self._script(
                SWEEP, [EXPIRY, TOMBSTONES, VERSION, CHANGES, PURGED, *HASHES],
                [repr(now), repr(now - TOMBSTONE_SECONDS), RECORDS, SWEEP_BATCH]))

        async def rounds() -> int:
            total = 0
            for _ in range(SWEEP_ROUNDS):
                done = int(await self._run("sweep", run))
                total += done
                if done < SWEEP_BATCH:
                    break
            return total
        return ensureDeferred(rounds())

    def lease(self, name: str, holder: str, seconds: float) -> Deferred[bool]:
        def run() -> Deferred[Any]:
            return ensureDeferred(self._script(
                LEASE_SCRIPT, [LEASE + name], [holder, int(seconds * 1000)]))
        return self._run("lease", run).addCallback(bool)

    def release(self, name: str, holder: str) -> Deferred[None]:
        def run() -> Deferred[Any]:
            return ensureDeferred(self._script(RELEASE_SCRIPT, [LEASE + name], [holder]))
        return self._run("release", run).addCallback(lambda _: None)

    def close(self) -> Deferred[None]:
        d: Deferred[None] = defer.maybeDeferred(self.redis.disconnect).addCallback(lambda _: None)
        return d


async def _call(command: Callable[[], Deferred[Any]]) -> Any:
    return await command()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
