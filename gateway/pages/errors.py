"""The error family: one template for every error the gateway answers itself.

Each page says what happened in one sentence, what the person can do, and the request
id and time to quote to an administrator. A 403 also says who the person is signed in as
and, in general terms, which kind of rule would let them in (see ``admits`` in
``gateway.pages.rules``). Browsers get HTML; ``Accept: application/json`` gets JSON;
everything else plain text as before (``403 Forbidden: <message>``); every form carries
the id in an ``X-Request-Id`` response header too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.pages.layout import (
    HTML,
    JSON,
    TEXT,
    Action,
    Look,
    Pairs,
    buttons,
    document,
    esc,
    iso,
    page_headers,
    utc,
)
from gateway.wire.responses import reason

# status -> (title, what happened, what you can do)
_TEXTS: dict[int, tuple[str, str, str]] = {
    400: ("Bad request", "The request could not be understood.",
          "Check the address, or start again from the application's first page."),
    401: ("Sign-in required", "You need to sign in to see this page.",
          "Sign in, then try again."),
    403: ("Access denied", "You are signed in, but this route does not allow you in.",
          "Ask an administrator for access to this route, or sign in as someone else."),
    404: ("Not found", "There is nothing at this address.",
          "Check the address; if a link brought you here, tell whoever published it."),
    405: ("Method not allowed", "This address does not accept this kind of request.",
          "Open the address in a browser, or check the client's request."),
    413: ("Request too large", "The request sent more data than this address accepts.",
          "Send less data, or ask an administrator."),
    421: ("Misdirected request", "This connection cannot serve this site (it was opened "
          "for another name).", "Reload the page; if this persists, open the address in "
          "a new window."),
    426: ("Upgrade required", "This site needs HTTP/1.1 or newer.",
          "Use an up-to-date browser or client."),
    431: ("Request headers too large", "The request's headers are too large.",
          "Clear this site's cookies, then try again."),
    495: ("Client certificate problem", "This site needs a valid client certificate, and "
          "your browser did not present one.", "Install the certificate your "
          "administrator gave you, restart the browser and try again."),
    500: ("Something went wrong", "The gateway could not handle this request.",
          "Try again in a moment; if this persists, tell an administrator."),
    502: ("Bad gateway", "The application behind this address failed to answer properly.",
          "Try again in a moment; if this persists, tell an administrator."),
    503: ("Service unavailable", "The service is unavailable right now.",
          "Try again in a moment; if this persists, tell an administrator."),
    504: ("Gateway timeout", "The application behind this address took too long to "
          "answer.", "Try again in a moment; if this persists, tell an administrator."),
}


def title_of(status: int) -> str:
    return _TEXTS.get(status, ("Error", "", ""))[0]


@dataclass(frozen=True, slots=True)
class ErrorView:
    """Everything one error page shows. ``message`` is the specific sentence (never
    internals); ``who`` the signed-in person (403); ``admits`` the general terms of the
    rules that would have let them in; ``actions`` the buttons (sign in, sign in as
    someone else, sign out)."""

    status: int
    message: str
    request_id: str
    at: float
    who: str = ""
    admits: tuple[str, ...] = ()
    actions: tuple[Action, ...] = ()
    host: str = ""


def _html(view: ErrorView, look: Look) -> bytes:
    title, what, todo = _TEXTS.get(view.status, ("Error", "Something went wrong.",
                                                 "Try again; if this persists, tell an "
                                                 "administrator."))
    parts = [f"<h1>{esc(title)}</h1><p class=code>Error {view.status}"
             + (f" · {esc(view.host)}" if view.host else "") + "</p>",
             f"<p>{esc(what)}</p>"]
    # the specific sentence, unless it only repeats the title, the sentence above or who
    # is signed in (shown next)
    said = {title.lower(), what.rstrip(".").lower(), reason(view.status).decode().lower()}
    if view.message and view.message.rstrip(".").lower() not in said and \
            not (view.who and view.who in view.message):
        parts.append(f"<p>{esc(view.message)}</p>")
    if view.who:
        parts.append(f"<p>Signed in as <strong>{esc(view.who)}</strong>.</p>")
    if view.admits:
        items = "".join(f"<li>{esc(a)}</li>" for a in view.admits)
        parts.append(f"<h2>Who this route lets in</h2><ul>{items}</ul>")
    parts.append(f"<h2>What you can do</h2><p>{esc(todo)}</p>")
    parts.append(buttons(view.actions))
    parts.append(f"<p class=quote>If you ask for help, quote: request id "
                 f"<code>{esc(view.request_id)}</code>, time {esc(utc(view.at))}, "
                 f"error {view.status}.</p>")
    return document(f"{view.status} {title}", "".join(parts), look)


def render_error(view: ErrorView, look: Look, *, html: bool, as_json: bool
                 ) -> tuple[bytes, Pairs]:
    """(body, headers) of the error in the form the client asked for."""
    if html:
        body, ctype = _html(view, look), HTML
    elif as_json:
        doc: dict[str, object] = {"status": view.status,
                                  "error": view.message or reason(view.status).decode(),
                                  "request_id": view.request_id, "time": iso(view.at)}
        if view.who:
            doc["signed_in_as"] = view.who
        if view.admits:
            doc["admits"] = list(view.admits)
        body, ctype = json.dumps(doc).encode() + b"\n", JSON
    else:
        line = f"{view.status} {reason(view.status).decode()}"
        if view.message:
            line += f": {view.message}"
        body = f"{line}\n".encode()  # as before; the id is in X-Request-Id
        ctype = TEXT
    return body, page_headers(look, ctype, view.request_id)
