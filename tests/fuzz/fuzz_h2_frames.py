"""Fuzz target: the downstream HTTP/2 codec (``gateway.dataplane.http2`` on
``h2``), driven through ``StringTransport`` with in-memory HTTP/1.1 upstreams that answer
every request they receive (the route and upstream checks of ``fuzz_http1_head``).

Input: chunk sizes, then the frames a client sends after the connection preface (the
corpus holds HPACK-encoded requests, CONNECT, resets, window updates, CONTINUATION ...).

Contract:

- nothing raises out of ``dataReceived`` (nor the upstream side, the watchdog or
  ``connectionLost``), and nothing is logged as a failure;
- what the client receives is well-formed HTTP/2: frames that parse, header blocks that
  decode in order, each response's first block with a valid ``:status``;
- what an upstream receives passes ``fuzz_http1_head.check_request`` (parses as
  HTTP/1.1, one Host, unambiguous framing, a normalised target under ``/backend/``, no
  ``X-Gateway-*`` from the client).
"""

from __future__ import annotations

from tests.fuzz.harness import chunks, describe, fuzz, instrumented, split_input

with instrumented("gateway", "hpack", "hyperframe"):
    import hpack
    from hyperframe.frame import (
        ContinuationFrame,
        DataFrame,
        Frame,
        HeadersFrame,
        PushPromiseFrame,
    )
    from twisted.internet.error import ConnectionDone
    from twisted.python.failure import Failure

    from gateway.dataplane.http2.connection import H2Connection
    from gateway.dataplane.http2.protocol import PREFACE
    from tests.fuzz.fuzz_http1_head import Session, check_request, logged_failures

MAX_FRAME = 2**24 - 1


def check_output(output: bytes) -> None:
    """The server's bytes: HTTP/2 frames whose header blocks decode."""
    decoder = hpack.Decoder()
    # The client may advertise any SETTINGS_HEADER_TABLE_SIZE; the encoder may use it.
    decoder.max_allowed_table_size = 2**32
    position = 0
    block = b""
    block_stream = 0
    started: set[int] = set()
    while position + 9 <= len(output):
        frame, length = Frame.parse_frame_header(memoryview(output[position:position + 9]))
        assert length <= MAX_FRAME, describe(output[position:position + 9])
        body = output[position + 9:position + 9 + length]
        if len(body) < length:
            break  # the last frame may be cut short only if the output ends there
        frame.parse_body(memoryview(body))
        position += 9 + length
        assert not isinstance(frame, PushPromiseFrame), "the gateway never pushes"
        if isinstance(frame, HeadersFrame | ContinuationFrame):
            if isinstance(frame, HeadersFrame):
                assert not block, "HEADERS inside an unfinished header block"
                block_stream = frame.stream_id
            else:
                assert block and frame.stream_id == block_stream, "stray CONTINUATION"
            block += frame.data
            if "END_HEADERS" in frame.flags:
                headers = list(decoder.decode(block, raw=True))
                block = b""
                if block_stream not in started:
                    started.add(block_stream)
                    assert headers and headers[0][0] == b":status", describe(headers)
                    status = headers[0][1]
                    assert status.isdigit() and 100 <= int(status) <= 599, describe(headers)
                    if int(status) < 200:
                        started.discard(block_stream)  # 100 Continue: more heads follow
        elif isinstance(frame, DataFrame):
            assert frame.stream_id in started, "DATA before the response's HEADERS"
    assert position == len(output), describe(output[position:position + 40])


def TestOneInput(data: bytes) -> None:
    with logged_failures() as failures:
        run_session(data)
    assert not failures, describe((data, failures))


def run_session(data: bytes) -> None:
    sizes, payload = split_input(data)
    session = Session(H2Connection)
    for chunk in chunks(PREFACE + payload, sizes):
        session.conn.dataReceived(chunk)
        session.pump()
    session.reactor.advance(1)
    session.pump()
    for _, requests in session.upstreams:
        for request in requests.requests:
            check_request(request)
    check_output(session.client.value())
    session.conn.connectionLost(Failure(ConnectionDone()))
    session.reactor.advance(30)
    session.core.stop()


if __name__ == "__main__":
    fuzz(TestOneInput)
