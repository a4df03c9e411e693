"""An error answer in one call, for code that has a request's headers at hand (the data
plane's ``fail``, the identity layer, forward auth): the request id is taken or made
here, the time read here, and the page rendered by ``errors``."""

from __future__ import annotations

import time

from gateway.pages.errors import ErrorView, render_error
from gateway.pages.layout import Action, Look, Pairs
from gateway.pages.request_id import request_id
from gateway.wire.responses import wants_html, wants_json


def error_answer(status: int, message: str, headers: list[tuple[bytes, bytes]], look: Look,
                 *, who: str = "", admits: tuple[str, ...] = (),
                 actions: tuple[Action, ...] = (), host: str = "", rid: str | None = None
                 ) -> tuple[bytes, Pairs]:
    """(body, headers incl. content type and ``X-Request-Id``) shaped for the client;
    ``rid``: the request's id when the caller has it (the data plane's exchange)."""
    view = ErrorView(status, message, request_id(headers) if rid is None else rid,
                     time.time(), who=who,
                     admits=admits, actions=actions, host=host)
    return render_error(view, look, html=wants_html(headers), as_json=wants_json(headers))
