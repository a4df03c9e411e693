from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Record(_message.Message):
    __slots__ = ("type", "id", "data", "version", "modified_at", "deleted_at", "expires_at")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    MODIFIED_AT_FIELD_NUMBER: _ClassVar[int]
    DELETED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    data: bytes
    version: int
    modified_at: float
    deleted_at: float
    expires_at: float
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ..., data: _Optional[bytes] = ..., version: _Optional[int] = ..., modified_at: _Optional[float] = ..., deleted_at: _Optional[float] = ..., expires_at: _Optional[float] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("type", "id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: Record
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ("type", "id", "data", "expires_at", "revive")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REVIVE_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    data: bytes
    expires_at: float
    revive: bool
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ..., data: _Optional[bytes] = ..., expires_at: _Optional[float] = ..., revive: _Optional[bool] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ("record",)
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: Record
    def __init__(self, record: _Optional[_Union[Record, _Mapping]] = ...) -> None: ...

class DeleteRequest(_message.Message):
    __slots__ = ("type", "id")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    type: str
    id: str
    def __init__(self, type: _Optional[str] = ..., id: _Optional[str] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryRequest(_message.Message):
    __slots__ = ("type",)
    TYPE_FIELD_NUMBER: _ClassVar[int]
    type: str
    def __init__(self, type: _Optional[str] = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...

class SyncRequest(_message.Message):
    __slots__ = ("since",)
    SINCE_FIELD_NUMBER: _ClassVar[int]
    since: int
    def __init__(self, since: _Optional[int] = ...) -> None: ...

class Changes(_message.Message):
    __slots__ = ("records", "version", "reset", "more", "epoch")
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESET_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    version: int
    reset: bool
    more: bool
    epoch: str
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., version: _Optional[int] = ..., reset: _Optional[bool] = ..., more: _Optional[bool] = ..., epoch: _Optional[str] = ...) -> None: ...

class SweepRequest(_message.Message):
    __slots__ = ("now",)
    NOW_FIELD_NUMBER: _ClassVar[int]
    now: float
    def __init__(self, now: _Optional[float] = ...) -> None: ...

class SweepResponse(_message.Message):
    __slots__ = ("dropped",)
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    dropped: int
    def __init__(self, dropped: _Optional[int] = ...) -> None: ...

class LeaseRequest(_message.Message):
    __slots__ = ("name", "holder", "seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    seconds: float
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ..., seconds: _Optional[float] = ...) -> None: ...

class LeaseResponse(_message.Message):
    __slots__ = ("held",)
    HELD_FIELD_NUMBER: _ClassVar[int]
    held: bool
    def __init__(self, held: _Optional[bool] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("name", "holder")
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    name: str
    holder: str
    def __init__(self, name: _Optional[str] = ..., holder: _Optional[str] = ...) -> None: ...

class ReleaseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
