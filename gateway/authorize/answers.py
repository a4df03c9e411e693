"""Answers given instead of forwarding: redirects, and the gateway's pages (the error
family, who am I, sign-out; rendered by ``gateway.pages``) for browsers, JSON or plain
text for everything else. Nothing internal is ever shown."""

from __future__ import annotations

from gateway.authorize.hook import Reply
from gateway.pages.answer import error_answer
from gateway.pages.layout import Action, Look, Pairs
from gateway.wire.responses import wants_html, wants_json

__all__ = ["answer", "error", "redirect", "wants_html", "wants_json"]


def redirect(location: str, extra: Pairs = (), status: int = 302) -> Reply:
    return Reply(status, b"", ((b"location", location.encode("latin-1")),
                              (b"cache-control", b"no-store"), *extra), reason="redirect")


def error(status: int, message: str, headers: list[tuple[bytes, bytes]], reason: str,
          extra: Pairs = (), *, look: Look | None = None, who: str = "",
          admits: tuple[str, ...] = (), actions: tuple[Action, ...] = (),
          host: str = "") -> Reply:
    """An error page of the family (request id, time, what to do) as a ``Reply``."""
    body, page = error_answer(status, message, headers, look or Look(), who=who,
                              admits=admits, actions=actions, host=host)
    return Reply(status, body, (*page, *extra), reason=reason)


def answer(status: int, body: bytes, page: Pairs, reason: str, extra: Pairs = ()) -> Reply:
    """A rendered page (who am I, sign-out) as a ``Reply`` the data plane writes."""
    return Reply(status, body, (*page, *extra), reason=reason)
