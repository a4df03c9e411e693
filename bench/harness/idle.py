"""Memory per idle keep-alive connection: open many (plain or TLS), each after one
request answered in full, and read the proxy's RSS before and after."""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .certs import client_context
from .probes import response_complete
from .sample import sample_rss, total_rss_kib


@dataclass
class _Conn:
    sock: socket.socket
    started: float
    buf: bytes = b""
    state: str = "connecting"


def open_idle(port: int, count: int, deadline: float, path: str = "/ping", in_flight: int = 32,
              per_conn_timeout: float = 10.0) -> tuple[list[socket.socket], dict[str, Any]]:
    """``count`` keep-alive connections, each after one ``GET <path>`` answered in full.

    At most ``in_flight`` connections are being set up at a time (the proxy's listen
    backlog may be small); gives up at ``deadline`` (monotonic)."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    sel = selectors.DefaultSelector()
    idle: list[socket.socket] = []
    statuses: dict[int, int] = {}
    failures: dict[str, int] = {}
    started = close_responses = 0

    def fail(c: _Conn, why: str) -> None:
        failures[why] = failures.get(why, 0) + 1
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(c.sock)
        c.sock.close()

    try:
        while len(idle) < count and time.monotonic() < deadline:
            budget = count - len(idle) - len(sel.get_map())
            while len(sel.get_map()) < in_flight and budget > 0:
                if sum(failures.values()) > max(100, count // 10):
                    break
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                err = s.connect_ex(("127.0.0.1", port))
                c = _Conn(s, time.monotonic())
                if err not in (0, errno.EINPROGRESS):
                    fail(c, errno.errorcode.get(err, str(err)))
                    continue
                sel.register(s, selectors.EVENT_WRITE, c)
                started += 1
                budget -= 1
            if not sel.get_map():
                break
            now = time.monotonic()
            for key, events in sel.select(timeout=0.5):
                c = key.data
                if c.state == "connecting" and events & selectors.EVENT_WRITE:
                    err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        fail(c, errno.errorcode.get(err, str(err)))
                        continue
                    try:
                        c.sock.send(request)
                    except OSError as exc:
                        fail(c, type(exc).__name__)
                        continue
                    c.state = "reading"
                    sel.modify(c.sock, selectors.EVENT_READ, c)
                elif c.state == "reading" and events & selectors.EVENT_READ:
                    try:
                        chunk = c.sock.recv(65536)
                    except OSError as exc:
                        fail(c, type(exc).__name__)
                        continue
                    if not chunk:
                        fail(c, "closed before the response ended")
                        continue
                    c.buf += chunk
                    done, status, close = response_complete(c.buf)
                    if done:
                        statuses[status] = statuses.get(status, 0) + 1
                        close_responses += close
                        sel.unregister(c.sock)
                        c.buf = b""
                        idle.append(c.sock)
            for key in list(sel.get_map().values()):
                if now - key.data.started > per_conn_timeout:
                    fail(key.data, "timeout")
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        sel.close()
    return idle, {"opened": len(idle), "attempted": started, "statuses": statuses,
                  "connection_close_responses": close_responses, "failures": failures}


def open_idle_tls(port: int, count: int, deadline: float, path: str = "/ping",
                  workers: int = 16) -> tuple[list[socket.socket], dict[str, Any]]:
    """``count`` TLS keep-alive connections, each after a full handshake and one
    ``GET <path>`` answered in full (``workers`` handshakes at a time)."""
    request = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    ctx = client_context()
    lock = threading.Lock()
    failures: dict[str, int] = {}
    statuses: dict[int, int] = {}
    close_responses = 0

    def one(_: int) -> socket.socket | None:
        nonlocal close_responses
        if time.monotonic() > deadline:
            return None
        try:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(request)
            buf = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    raise OSError("closed before the response ended")
                buf += chunk
                done, status, close = response_complete(buf)
                if done:
                    break
        except OSError as exc:
            with lock:
                why = type(exc).__name__
                failures[why] = failures.get(why, 0) + 1
            return None
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
            close_responses += close
        # The harness's checks peek at the raw socket (an SSLSocket refuses MSG_PEEK):
        # hand back a duplicate of its descriptor; closing the SSLSocket sends nothing.
        plain = socket.socket(fileno=os.dup(s.fileno()))
        s.close()
        return plain

    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        opened = [s for s in pool.map(one, range(count)) if s is not None]
    return opened, {"opened": len(opened), "attempted": count, "statuses": statuses,
                    "connection_close_responses": close_responses, "failures": failures}


def still_open(socks: Sequence[socket.socket]) -> int:
    """How many of the idle connections the peer has not closed."""
    n = 0
    for s in socks:
        try:
            s.setblocking(False)
            data = s.recv(1, socket.MSG_PEEK)
            if data:  # unexpected bytes, but still open
                n += 1
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def idle_memory(name: str, port: int, pids: Callable[[], list[int]], count: int,
                timeout: float, path: str,
                opener: Callable[..., tuple[list[Any], dict[str, Any]]] | None = None,
                ) -> dict[str, Any]:
    """(RSS with ``count`` idle connections open - RSS before) / connections, in KiB.

    The figure is only valid when the proxy kept (nearly) all of them open until the RSS
    was read; otherwise ``kib_per_connection`` is None and ``invalid`` says why."""
    time.sleep(1.0)  # let the previous load settle
    before = sample_rss(pids(), 3, 0.1)
    t0 = time.monotonic()
    socks, stats = (opener or open_idle)(port, count, t0 + timeout, path)
    open_s = time.monotonic() - t0
    try:
        time.sleep(1.0)
        alive_before = still_open(socks)
        after = sample_rss(pids(), 3, 0.2)
        alive = min(alive_before, still_open(socks))
    finally:
        for s in socks:
            s.close()
    time.sleep(0.5)
    after_close = total_rss_kib(pids())
    opened = stats["opened"]
    per = (after - before) / opened if opened else None
    result: dict[str, Any] = {
        "target": name, "path": path, "requested": count, **stats,
        "seconds_to_open": round(open_s, 2), "still_open_at_measurement": alive,
        "rss_before_kib": before, "rss_after_kib": after, "rss_after_close_kib": after_close,
        "kib_per_connection_raw": per, "kib_per_connection": per,
    }
    if not opened:
        result["invalid"] = "no connection could be opened"
    elif alive < 0.95 * opened:
        result["kib_per_connection"] = None
        result["invalid"] = (
            f"the proxy closed {opened - alive} of {opened} connections before the RSS was read"
            + (f" ({stats['connection_close_responses']} responses to GET {path} carried "
               "Connection: close)" if stats["connection_close_responses"] else ""))
    shown = result["kib_per_connection"]
    per_s = f"{shown:.2f} KiB/conn" if shown is not None else f"n/a ({result.get('invalid')})"
    print(f"  {name}: {opened}/{count} idle connections in {open_s:.1f} s, {alive} still open, "
          f"RSS {before:,} -> {after:,} KiB: {per_s}", flush=True)
    return result
