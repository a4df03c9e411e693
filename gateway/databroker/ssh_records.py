"""Native SSH's records in the databroker, shared by every gateway process:

- ``ssh.sign_in``/TICKET: an SSH connection whose key is not bound yet waits for its
  person to open ``/.gateway/ssh/TICKET`` and confirm; the page writes the session id in.
- ``ssh.key``/FINGERPRINT: the key's binding to a session, until the session expires;
  the session's end (sign-out, revocation, a failed refresh) ends the binding with it,
  since the session is read each time.
- ``ssh.host_key``/ROUTE: a server's host key pinned on first use.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from gateway.databroker.records import (
    SSH_HOST_KEY,
    SSH_KEY,
    SSH_SIGN_IN,
    Record,
    RecordStore,
)

SIGN_IN_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class PendingSignIn:
    ticket: str
    fingerprint: str
    client: str  # the SSH client's address, shown on the confirmation page
    route: str
    login: str
    expires_at: float
    session_id: str = ""  # set once the person confirmed


def _json(data: dict[str, object]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


async def start_sign_in(records: RecordStore, fingerprint: str, client: str, route: str,
                        login: str, now: float) -> PendingSignIn:
    pending = PendingSignIn(secrets.token_urlsafe(18), fingerprint, client, route, login,
                            now + SIGN_IN_SECONDS)
    await records.put(SSH_SIGN_IN, pending.ticket, _json({
        "fp": fingerprint, "client": client, "route": route, "login": login,
        "exp": pending.expires_at, "sid": ""}), expires_at=pending.expires_at)
    return pending


async def read_sign_in(records: RecordStore, ticket: str, now: float
                       ) -> PendingSignIn | None:
    if not ticket or len(ticket) > 64:
        return None
    return sign_in_of(await records.get(SSH_SIGN_IN, ticket), now)


def sign_in_of(record: Record | None, now: float) -> PendingSignIn | None:
    """The pending sign-in an ``ssh.sign_in`` record holds (None: deleted, expired or
    unreadable), as read or as the change stream brings it."""
    if record is None or record.deleted:
        return None
    try:
        data = json.loads(record.data)
        pending = PendingSignIn(record.id, str(data["fp"]), str(data["client"]),
                                str(data["route"]), str(data["login"]), float(data["exp"]),
                                str(data.get("sid", "")))
    except (ValueError, KeyError, TypeError):
        return None
    return pending if now < pending.expires_at else None


async def confirm_sign_in(records: RecordStore, pending: PendingSignIn, session_id: str,
                          session_expires_at: float) -> None:
    """The person confirmed: the key is bound to their session, and the waiting
    connection learns the session id."""
    await records.put(SSH_KEY, pending.fingerprint,
                      _json({"sid": session_id, "exp": session_expires_at}),
                      expires_at=session_expires_at)
    await records.put(SSH_SIGN_IN, pending.ticket, _json({
        "fp": pending.fingerprint, "client": pending.client, "route": pending.route,
        "login": pending.login, "exp": pending.expires_at, "sid": session_id}),
        expires_at=pending.expires_at)


async def bound_session_id(records: RecordStore, fingerprint: str, now: float) -> str:
    """The session the key is bound to (``""``: none, or expired)."""
    record = await records.get(SSH_KEY, fingerprint)
    if record is None or record.deleted:
        return ""
    try:
        data = json.loads(record.data)
        sid, expires = str(data["sid"]), float(data["exp"])
    except (ValueError, KeyError, TypeError):
        return ""
    return sid if now < expires else ""


async def pinned_host_key(records: RecordStore, route: str) -> bytes | None:
    record = await records.get(SSH_HOST_KEY, route)
    if record is None or record.deleted:
        return None
    return bytes.fromhex(json.loads(record.data)["blob"])


async def pin_host_key(records: RecordStore, route: str, blob: bytes) -> None:
    await records.put(SSH_HOST_KEY, route, _json({"blob": blob.hex()}))
