"""Fakes for unit tests and fuzzing of the SSH server's protocols: a transport that
records the packets sent (``FakeSSH``, with the attributes ``GatewayUserAuth`` reads of
a ``GatewayServerTransport``) and a ``Gate`` whose answers a test sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.ssh.auth import Refused
from gateway.ssh.user_names import LoginTarget


@dataclass
class FakeSSH:
    sessionID: bytes = b"\x01" * 32
    client_ip: str = "192.0.2.7"
    sent: list[tuple[int, bytes]] = field(default_factory=list)
    disconnected: tuple[int, bytes] | None = None
    authenticated: bool = False
    lost: bool = False
    jump_route: str = ""
    service: Any = None
    grace: float = 0.0
    graces: int = 0  # times the login grace was extended
    strikes: list[str] = field(default_factory=list)
    transport: Any = field(default_factory=lambda: _Wire())
    on_lost: Any = None  # set by the service's ``register``

    def sendPacket(self, kind: int, payload: bytes) -> None:
        assert self.disconnected is None, "a packet after the disconnect"
        self.sent.append((kind, payload))

    def sendDisconnect(self, code: int, message: bytes) -> None:
        assert self.disconnected is None, "disconnected twice"
        self.disconnected = (code, message)
        self.transport.disconnecting = True

    def extend_grace(self, seconds: float) -> None:
        self.grace = seconds
        self.graces += 1

    def strike(self, rule: str) -> None:
        self.strikes.append(rule)

    def mark_authenticated(self) -> None:
        self.authenticated = True

    def setService(self, service: Any) -> None:
        self.service = service

    def kinds(self) -> list[int]:
        return [kind for kind, _ in self.sent]


@dataclass
class _Wire:
    disconnecting: bool = False


@dataclass
class FakeGate:
    """``bound``: the session bound keys give (None: none); ``confirmed``: the session a
    sign-in ends with; ``refusal``: admit refuses with it."""

    bound: Any = None
    confirmed: Any = None
    refusal: str = ""
    admitted: list[tuple[LoginTarget, Any, str]] = field(default_factory=list)
    asked: list[tuple[LoginTarget, str]] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)

    async def bound_session(self, key_fingerprint: str) -> Any:
        return self.bound

    async def start_sign_in(self, ssh: Any, target: LoginTarget, key_fingerprint: str
                            ) -> tuple[str, str]:
        self.asked.append((target, key_fingerprint))
        return "https://authenticate.example.com/.gateway/ssh/TICKET", "TICKET"

    def end_sign_in(self, ssh: Any, ticket: str, confirmed: bool) -> None:
        self.ended.append(ticket)

    async def wait_sign_in(self, ssh: Any, ticket: str) -> Any:
        return self.confirmed

    async def admit(self, ssh: Any, target: LoginTarget, session: Any, key_fingerprint: str
                    ) -> Any:
        if self.refusal:
            raise Refused(self.refusal)
        self.admitted.append((target, session, key_fingerprint))
        return "bridge"
