"""The hand-written encoders, read back by independent decoders: the ``thrift``
package's binary and compact protocols, and ``msgpack``."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import strategies as st
from thrift.protocol.TBinaryProtocol import TBinaryProtocol
from thrift.protocol.TCompactProtocol import TCompactProtocol
from thrift.Thrift import TMessageType
from thrift.transport.TTransport import TMemoryBuffer
from twisted.trial.unittest import SynchronousTestCase

from gateway.observability.tracing.msgpack_wire import packb
from gateway.observability.tracing.thrift_wire import (
    BOOL,
    DOUBLE,
    I32,
    I64,
    LIST,
    ONEWAY,
    STRING,
    STRUCT,
    binary_struct,
    compact_message,
    compact_struct,
    signed64,
)
from tests.support.trace_collectors import _read_struct

I64S = st.integers(min_value=-(2**63), max_value=2**63 - 1)
I32S = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def sample(i64: int, i32: int, text: str, flag: bool, number: float,
           count: int) -> list[tuple[int, int, object]]:
    inner = [[(1, STRING, f"k{n}"), (2, I32, n), (3, BOOL, n % 2 == 0)] for n in range(count)]
    return [(1, I64, i64), (2, I32, i32), (3, STRING, text), (4, BOOL, flag),
            (5, DOUBLE, number), (6, LIST, (STRUCT, inner)), (7, STRING, None),
            (20, I64, -1), (40, STRUCT, [(1, BOOL, True), (2, STRING, "x")])]


def expected(i64: int, i32: int, text: str, flag: bool, number: float,
             count: int) -> dict[int, object]:
    return {1: i64, 2: i32, 3: text.encode(), 4: flag, 5: number,
            6: [{1: f"k{n}".encode(), 2: n, 3: n % 2 == 0} for n in range(count)],
            20: -1, 40: {1: True, 2: b"x"}}


ARGS = (I64S, I32S, st.text(max_size=40), st.booleans(),
        st.floats(allow_nan=False), st.integers(min_value=0, max_value=20))


class ThriftTests(SynchronousTestCase):
    @given(st.tuples(*ARGS))
    def test_binary(self, args: tuple[int, int, str, bool, float, int]) -> None:
        data = binary_struct(sample(*args))
        self.assertEqual(_read_struct(TBinaryProtocol(TMemoryBuffer(data))), expected(*args))

    @given(st.tuples(*ARGS))
    def test_compact(self, args: tuple[int, int, str, bool, float, int]) -> None:
        data = compact_struct(sample(*args))
        self.assertEqual(_read_struct(TCompactProtocol(TMemoryBuffer(data))), expected(*args))

    def test_compact_message(self) -> None:
        data = compact_message("emitBatch", ONEWAY, 7, [(1, STRUCT, [(1, STRING, "svc")])])
        proto = TCompactProtocol(TMemoryBuffer(data))
        self.assertEqual(proto.readMessageBegin(), ("emitBatch", TMessageType.ONEWAY, 7))
        self.assertEqual(_read_struct(proto), {1: {1: b"svc"}})

    def test_signed64(self) -> None:
        self.assertEqual(signed64(2**64 - 1), -1)
        self.assertEqual(signed64(2**63), -(2**63))
        self.assertEqual(signed64(5), 5)


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False) | st.text(max_size=300),
    lambda children: st.lists(children, max_size=20)
    | st.dictionaries(st.text(max_size=10), children, max_size=20),
    max_leaves=40)


class MsgpackTests(SynchronousTestCase):
    @given(VALUES)
    def test_round_trip(self, value: object) -> None:
        self.assertEqual(msgpack.unpackb(packb(value), raw=False, strict_map_key=False),
                         value)

    def test_sizes(self) -> None:
        """Each length class of strings, arrays and maps (fix, 16 and 32 bit)."""
        for n in (0, 15, 16, 31, 32, 255, 256, 65535, 65536):
            for value in ("x" * n, [1] * n, {str(i): i for i in range(n)}):
                self.assertEqual(msgpack.unpackb(packb(value), raw=False), value)
