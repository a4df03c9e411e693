from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Header(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: bytes
    value: bytes
    def __init__(self, name: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...

class CheckRequest(_message.Message):
    __slots__ = ("method", "scheme", "host", "path", "query", "client_ip", "headers", "route_key", "connect", "client_cert", "mcp")
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    CLIENT_IP_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    ROUTE_KEY_FIELD_NUMBER: _ClassVar[int]
    CONNECT_FIELD_NUMBER: _ClassVar[int]
    CLIENT_CERT_FIELD_NUMBER: _ClassVar[int]
    MCP_FIELD_NUMBER: _ClassVar[int]
    method: bytes
    scheme: str
    host: str
    path: str
    query: bytes
    client_ip: str
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    route_key: str
    connect: bool
    client_cert: bytes
    mcp: McpMessages
    def __init__(self, method: _Optional[bytes] = ..., scheme: _Optional[str] = ..., host: _Optional[str] = ..., path: _Optional[str] = ..., query: _Optional[bytes] = ..., client_ip: _Optional[str] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., route_key: _Optional[str] = ..., connect: _Optional[bool] = ..., client_cert: _Optional[bytes] = ..., mcp: _Optional[_Union[McpMessages, _Mapping]] = ...) -> None: ...

class McpMessage(_message.Message):
    __slots__ = ("id_json", "method", "name", "arguments_sha256", "protocol_version")
    ID_JSON_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_SHA256_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    id_json: str
    method: str
    name: str
    arguments_sha256: str
    protocol_version: str
    def __init__(self, id_json: _Optional[str] = ..., method: _Optional[str] = ..., name: _Optional[str] = ..., arguments_sha256: _Optional[str] = ..., protocol_version: _Optional[str] = ...) -> None: ...

class McpMessages(_message.Message):
    __slots__ = ("messages", "batch", "protocol_version")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[McpMessage]
    batch: bool
    protocol_version: str
    def __init__(self, messages: _Optional[_Iterable[_Union[McpMessage, _Mapping]]] = ..., batch: _Optional[bool] = ..., protocol_version: _Optional[str] = ...) -> None: ...

class McpVerdict(_message.Message):
    __slots__ = ("allowed", "rule", "reasons")
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    allowed: bool
    rule: str
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, allowed: _Optional[bool] = ..., rule: _Optional[str] = ..., reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class Allowed(_message.Message):
    __slots__ = ("headers", "remove", "strip_cookie", "mcp")
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    STRIP_COOKIE_FIELD_NUMBER: _ClassVar[int]
    MCP_FIELD_NUMBER: _ClassVar[int]
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    remove: _containers.RepeatedScalarFieldContainer[bytes]
    strip_cookie: str
    mcp: _containers.RepeatedCompositeFieldContainer[McpVerdict]
    def __init__(self, headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., remove: _Optional[_Iterable[bytes]] = ..., strip_cookie: _Optional[str] = ..., mcp: _Optional[_Iterable[_Union[McpVerdict, _Mapping]]] = ...) -> None: ...

class Denied(_message.Message):
    __slots__ = ("status", "body", "headers", "reason", "mcp")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MCP_FIELD_NUMBER: _ClassVar[int]
    status: int
    body: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    reason: str
    mcp: _containers.RepeatedCompositeFieldContainer[McpVerdict]
    def __init__(self, status: _Optional[int] = ..., body: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., reason: _Optional[str] = ..., mcp: _Optional[_Iterable[_Union[McpVerdict, _Mapping]]] = ...) -> None: ...

class CheckResponse(_message.Message):
    __slots__ = ("allow", "deny", "route_key", "mismatch", "signing_kid")
    ALLOW_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    ROUTE_KEY_FIELD_NUMBER: _ClassVar[int]
    MISMATCH_FIELD_NUMBER: _ClassVar[int]
    SIGNING_KID_FIELD_NUMBER: _ClassVar[int]
    allow: Allowed
    deny: Denied
    route_key: str
    mismatch: bool
    signing_kid: str
    def __init__(self, allow: _Optional[_Union[Allowed, _Mapping]] = ..., deny: _Optional[_Union[Denied, _Mapping]] = ..., route_key: _Optional[str] = ..., mismatch: _Optional[bool] = ..., signing_kid: _Optional[str] = ...) -> None: ...

class SigningKeyRequest(_message.Message):
    __slots__ = ("kid", "process")
    KID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    kid: str
    process: str
    def __init__(self, kid: _Optional[str] = ..., process: _Optional[str] = ...) -> None: ...

class SigningKeyResponse(_message.Message):
    __slots__ = ("kid", "algorithm")
    KID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    kid: str
    algorithm: str
    def __init__(self, kid: _Optional[str] = ..., algorithm: _Optional[str] = ...) -> None: ...
