"""Records and change batches to and from their protobuf messages (one place, both ways)."""

from __future__ import annotations

from gateway.databroker.records import Changes, Record
from gateway.rpc.protos import databroker_pb2 as pb


def record_to_pb(record: Record) -> pb.Record:
    return pb.Record(type=record.type, id=record.id, data=record.data, version=record.version,
                     modified_at=record.modified_at, deleted_at=record.deleted_at,
                     expires_at=record.expires_at)


def record_from_pb(message: pb.Record) -> Record:
    return Record(type=message.type, id=message.id, data=message.data,
                  version=message.version, modified_at=message.modified_at,
                  deleted_at=message.deleted_at, expires_at=message.expires_at)


def changes_to_pb(changes: Changes) -> pb.Changes:
    return pb.Changes(records=[record_to_pb(r) for r in changes.records],
                      version=changes.version, reset=changes.reset, more=changes.more,
                      epoch=changes.epoch)


def changes_from_pb(message: pb.Changes) -> Changes:
    return Changes(records=tuple(record_from_pb(r) for r in message.records),
                   version=message.version, reset=message.reset, more=message.more,
                   epoch=message.epoch)
