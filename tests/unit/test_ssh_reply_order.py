"""A session channel's replies go out in the order of its requests (RFC 4254 5.4; the
OpenSSH client pairs them up by order): a request refused at once, or one waiting for
its recording's file, is answered after the server's answer to an earlier one."""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred
from twisted.trial.unittest import SynchronousTestCase

from gateway.ssh.channel_relay import Context, PersonSide


class FakeServerSide:
    """The server's side of the channel: each relayed request waits for the test."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, Deferred[Any]]] = []
        self.disk_full = False

    def send_request(self, kind: bytes, data: bytes, want_reply: bool) -> Deferred[Any]:
        answer: Deferred[Any] = Deferred()
        self.sent.append((kind, answer))
        return answer


def person() -> tuple[PersonSide, FakeServerSide]:
    ctx = Context(connection_id="c", route="db", login="root", user="alice@example.test",
                  client="127.0.0.1", allow_port_forwarding=False,
                  recordings=lambda title, w, h, term: None, clock=lambda: 0.0)
    side = PersonSide(b"session", ctx, 1 << 20, 32768, conn=None)  # type: ignore[arg-type]
    server = FakeServerSide()
    side.peer = server  # type: ignore[assignment]
    return side, server


class ReplyOrderTests(SynchronousTestCase):
    def test_a_refusal_waits_for_the_servers_earlier_answer(self) -> None:
        side, server = person()
        replies: list[tuple[str, object]] = []
        pty = side.requestReceived(b"pty-req", b"\x00\x00\x00\x05xterm" + b"\x00" * 16)
        pty.addCallback(lambda ok: replies.append(("pty-req", ok)))  # (as Conch does)
        x11 = side.requestReceived(b"x11-req", b"")
        x11.addCallback(lambda ok: replies.append(("x11-req", ok)))
        self.assertEqual(replies, [])  # the refusal is ready, but not its turn
        self.assertEqual([kind for kind, _ in server.sent], [b"pty-req"])
        server.sent[0][1].callback(b"")
        self.assertEqual(replies, [("pty-req", True), ("x11-req", False)])

    def test_answers_in_order_when_the_server_answers_out_of_order(self) -> None:
        side, server = person()
        replies: list[tuple[str, object]] = []
        for kind in (b"env", b"pty-req", b"env"):
            answer = side.requestReceived(kind, b"")
            answer.addCallback(lambda ok, kind=kind: replies.append((kind.decode(), ok)))
        server.sent[2][1].callback(b"")
        server.sent[1][1].errback(Exception("refused"))
        self.assertEqual(replies, [])
        server.sent[0][1].callback(b"")
        self.assertEqual(replies, [("env", True), ("pty-req", False), ("env", True)])

    def test_with_nothing_pending_an_answer_is_immediate(self) -> None:
        side, _ = person()
        self.assertIs(self.successResultOf(side.requestReceived(b"x11-req", b"")), False)
