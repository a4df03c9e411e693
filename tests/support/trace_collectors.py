"""Loopback stand-ins for the three kinds of trace collector, and independent decoders
of what the gateway sends them.

``HttpCollector`` records every POST/PUT (Zipkin's ``/api/v2/spans``, Jaeger's
``/api/traces``, the trace agent's ``/v0.4/traces``) and can answer slowly or not at all;
``UdpCollector`` records the datagrams a Jaeger agent would get. The decoders share no
code with the gateway's encoders: Zipkin JSON is checked field by field against the v2
model (zipkin2-api.yaml's ``Span``), Jaeger Thrift is read with the ``thrift`` package's
own protocols, the agent's MessagePack with ``msgpack``. Each gives ``Span`` values, so
one set of assertions covers the three.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Span:
    """One span, as any of the three formats describes it (ids as integers)."""

    trace_id: int
    span_id: int
    parent_id: int  # 0: none
    name: str
    kind: str | None  # "server", "client" or None (internal)
    start_us: int
    duration_us: int
    tags: dict[str, str] = field(default_factory=dict)
    error: bool = False

    @property
    def end_us(self) -> int:
        return self.start_us + self.duration_us


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class HttpCollector:
    """``delay``: seconds before answering; ``status``: the answer's code."""

    def __init__(self, delay: float = 0.0, status: int = 202) -> None:
        self.delay = delay
        self.status = status
        self.received: list[Received] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _record(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with collector.lock:
                    collector.received.append(Received(
                        self.command, self.path, {k.lower(): v for k, v in
                                                  self.headers.items()}, body))
                if collector.delay:
                    time.sleep(collector.delay)
                self.send_response(collector.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_PUT = _record

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> HttpCollector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[Received]:
        with self.lock:
            return list(self.received)


class UdpCollector:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.datagrams: list[bytes] = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping:
            try:
                data = self.sock.recv(70000)
            except TimeoutError:
                continue
            except OSError:
                return
            with self.lock:
                self.datagrams.append(data)

    def __enter__(self) -> UdpCollector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping = True
        self.thread.join(2)
        self.sock.close()

    def bodies(self) -> list[bytes]:
        with self.lock:
            return list(self.datagrams)


def wait_for_spans(decode: Callable[[], list[Span]], predicate: Callable[[list[Span]], bool],
                   timeout: float = 20.0) -> list[Span]:
    """Decode what arrived until ``predicate`` holds (the export runs every second)."""
    deadline = time.monotonic() + timeout
    spans: list[Span] = []
    while time.monotonic() < deadline:
        spans = decode()
        if predicate(spans):
            return spans
        time.sleep(0.1)
    raise AssertionError(f"spans not seen in {timeout}s; got {[s.name for s in spans]}")


# -- Zipkin v2 JSON ------------------------------------------------------------------

_HEX_TRACE = re.compile(r"^[0-9a-f]{16,32}$")
_HEX_ID = re.compile(r"^[0-9a-f]{16}$")
_KINDS = {"CLIENT", "SERVER", "PRODUCER", "CONSUMER"}
_ENDPOINT_FIELDS = {"serviceName": str, "ipv4": str, "ipv6": str, "port": int}
_SPAN_FIELDS = {"traceId", "id", "parentId", "name", "kind", "timestamp", "duration",
                "localEndpoint", "remoteEndpoint", "annotations", "tags", "debug", "shared"}


def check_zipkin_span(span: Any) -> None:
    """The v2 model's rules for a Span (zipkin2-api.yaml): required ids in lower-case
    hex, known fields only, typed values, string tags, a kind from the enum."""
    assert isinstance(span, dict), span
    assert set(span) <= _SPAN_FIELDS, set(span) - _SPAN_FIELDS
    assert _HEX_TRACE.match(span["traceId"]), span["traceId"]
    assert _HEX_ID.match(span["id"]), span["id"]
    if "parentId" in span:
        assert _HEX_ID.match(span["parentId"]), span["parentId"]
    if "kind" in span:
        assert span["kind"] in _KINDS, span["kind"]
    for key in ("timestamp", "duration"):
        if key in span:
            assert isinstance(span[key], int) and span[key] >= 0, (key, span[key])
    assert isinstance(span.get("name", ""), str)
    for key in ("localEndpoint", "remoteEndpoint"):
        if key in span:
            endpoint = span[key]
            assert isinstance(endpoint, dict) and set(endpoint) <= set(_ENDPOINT_FIELDS)
            for name, kind in _ENDPOINT_FIELDS.items():
                assert name not in endpoint or isinstance(endpoint[name], kind)
    tags = span.get("tags", {})
    assert isinstance(tags, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()), tags
    for key in ("debug", "shared"):
        assert key not in span or isinstance(span[key], bool)


def decode_zipkin(body: bytes) -> list[Span]:
    data = json.loads(body)
    assert isinstance(data, list)
    out = []
    for item in data:
        check_zipkin_span(item)
        tags = dict(item.get("tags", {}))
        out.append(Span(int(item["traceId"], 16), int(item["id"], 16),
                        int(item.get("parentId", "0"), 16), item.get("name", ""),
                        item["kind"].lower() if "kind" in item else None,
                        item["timestamp"], item["duration"], tags,
                        error="error" in tags))
        assert item["localEndpoint"]["serviceName"]
    return out


# -- Jaeger Thrift (read with the thrift package) -------------------------------------

def _read_value(proto: Any, ttype: int) -> Any:
    from thrift.Thrift import TType

    if ttype == TType.STRUCT:
        return _read_struct(proto)
    if ttype == TType.LIST:
        etype, size = proto.readListBegin()
        items = [_read_value(proto, etype) for _ in range(size)]
        proto.readListEnd()
        return items
    reader = {TType.BOOL: proto.readBool, TType.I32: proto.readI32, TType.I64: proto.readI64,
              TType.DOUBLE: proto.readDouble, TType.STRING: proto.readBinary}[ttype]
    return reader()


def _read_struct(proto: Any) -> dict[int, Any]:
    """Any struct as {field id: value}, with the thrift package's own protocol code."""
    from thrift.Thrift import TType

    out: dict[int, Any] = {}
    proto.readStructBegin()
    while True:
        _, ttype, fid = proto.readFieldBegin()
        if ttype == TType.STOP:
            break
        out[fid] = _read_value(proto, ttype)
        proto.readFieldEnd()
    proto.readStructEnd()
    return out


def _u64(n: int) -> int:
    return n & 0xFFFFFFFFFFFFFFFF


def _jaeger_spans(batch: dict[int, Any]) -> list[Span]:
    process = batch[1]
    assert process[1], "Process.serviceName is required"
    out = []
    for s in batch[2]:
        for fid in (1, 2, 3, 4, 5, 7, 8, 9):
            assert fid in s, f"required Span field {fid} missing"
        tags = {}
        for tag in s.get(10, []):
            key, vtype = tag[1].decode(), tag[2]
            value = {0: lambda t: t[3].decode(), 1: lambda t: repr(t[4]),
                     2: lambda t: str(t[5]).lower(), 3: lambda t: str(t[6])}[vtype](tag)
            tags[key] = value
        refs = s.get(6, [])
        trace_id = (_u64(s[2]) << 64) | _u64(s[1])
        parent = _u64(s[4])
        if parent:
            ref = refs[0] if refs else {}  # CHILD_OF the parent, in the same trace
            assert (ref.get(1), ref.get(2), ref.get(3), ref.get(4)) == (0, s[1], s[2], s[4]), refs
        out.append(Span(trace_id, _u64(s[3]), parent, s[5].decode(),
                        tags.get("span.kind"), s[8], s[9], tags,
                        error=tags.get("error") == "true"))
    return out


def decode_jaeger_binary(body: bytes) -> list[Span]:
    from thrift.protocol.TBinaryProtocol import TBinaryProtocol
    from thrift.transport.TTransport import TMemoryBuffer

    return _jaeger_spans(_read_struct(TBinaryProtocol(TMemoryBuffer(body))))


def decode_jaeger_compact(datagram: bytes) -> list[Span]:
    """An ``Agent.emitBatch`` one-way call."""
    from thrift.protocol.TCompactProtocol import TCompactProtocol
    from thrift.Thrift import TMessageType
    from thrift.transport.TTransport import TMemoryBuffer

    proto = TCompactProtocol(TMemoryBuffer(datagram))
    name, mtype, _ = proto.readMessageBegin()
    assert (name, mtype) == ("emitBatch", TMessageType.ONEWAY), (name, mtype)
    args = _read_struct(proto)
    proto.readMessageEnd()
    return _jaeger_spans(args[1])


# -- the trace agent's API v0.4 (read with msgpack) ----------------------------------

def decode_agent(body: bytes) -> list[Span]:
    import msgpack

    traces = msgpack.unpackb(body, raw=False)
    assert isinstance(traces, list)
    out = []
    for trace in traces:
        assert trace and len({s["trace_id"] for s in trace}) == 1, "one trace id per trace"
        for s in trace:
            for key, kind in (("trace_id", int), ("span_id", int), ("parent_id", int),
                              ("name", str), ("resource", str), ("service", str),
                              ("start", int), ("duration", int), ("error", int),
                              ("meta", dict), ("metrics", dict)):
                assert isinstance(s[key], kind), (key, s[key])
            assert all(isinstance(v, str) for v in s["meta"].values())
            assert all(isinstance(v, float) for v in s["metrics"].values())
            tags = dict(s["meta"])
            tags.update({k: str(int(v)) if v == int(v) else repr(v)
                         for k, v in s["metrics"].items()})
            high = int(tags.get("_dd.p.tid", "0"), 16)
            kind = tags.get("span.kind")
            out.append(Span((high << 64) | s["trace_id"], s["span_id"], s["parent_id"],
                            s["name"], None if kind == "internal" else kind,
                            s["start"] // 1000, s["duration"] // 1000, tags,
                            error=bool(s["error"])))
    return out
