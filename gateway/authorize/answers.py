"""Answers given instead of forwarding: redirects, and the gateway's pages (the error
family, who am I, sign-out; rendered by ``gateway.pages``) for browsers, JSON or plain
text for everything else; and the sentence a refused person reads. Nothing internal is
ever shown."""

from __future__ import annotations

from gateway.authorize.email import REFUSAL_TEXT
from gateway.authorize.hook import Reply
from gateway.pages.answer import error_answer
from gateway.pages.layout import Action, Look, Pairs
from gateway.policy import Verdict
from gateway.wire.responses import wants_html, wants_json

__all__ = ["answer", "denial_message", "error", "redirect", "wants_html", "wants_json"]


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


def denial_message(who: str, reasons: tuple[str, ...], refusal: str, claimed: str,
                   verdict: Verdict | None = None) -> str:
    """The sentence a signed-in person who is refused reads (the 403 page, its JSON, and
    ``gateway policy check``): a policy's kind of condition, in words and without the
    policy's values; for the allow fields, that the route does not let them in; why
    their e-mail is not used when a rule needed it. A policy's sentence names no one:
    the page shows who is signed in beside it, and leaves out a sentence that repeats
    that."""
    if verdict is not None:
        message = verdict.text[:1].upper() + verdict.text[1:] + "."
    else:
        message = (f"You are signed in as {who}, but this route does not allow you in."
                   if who else "You are signed in, but this route does not allow you in.")
    if refusal and (refusal in reasons or (verdict is not None
                                           and verdict.kind in ("user", "domain"))):
        address = f" ({claimed})" if claimed != who else ""
        message = (f"This route needs your e-mail address, and {REFUSAL_TEXT[refusal]}"
                   f"{address}.")
    if "groups-need-service-account" in reasons:
        message += " Group rules need idp_service_account, which is not configured."
    return message
