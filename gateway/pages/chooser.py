"""The provider chooser: the page of the authenticate host that asks someone signing in
for a route accepting several identity providers which one to use.

It names the providers (their ``name``, else their id) and nothing else: not the route,
not its policy, not the address the person is going back to (it is sealed in each
link). Each provider is a link (GET: nothing for ``form-action`` to refuse on the way
through the provider's redirects).
"""

from __future__ import annotations

from gateway.pages.layout import HTML, Action, Look, Pairs, buttons, document, page_headers


def choose_provider(choices: tuple[tuple[str, str], ...], action: str,
                    sealed: str, look: Look, marker: str = "chosen") -> tuple[bytes, Pairs]:
    """``choices``: (id, name shown) in the order offered; ``action``: the sign-in
    endpoint each link starts again with ``gateway_redirect=sealed&provider=ID``, and
    ``marker=1``: a pick made here (the only one the sign-in remembers)."""
    links = tuple(Action(name, action, "get",
                         (("gateway_redirect", sealed), ("provider", provider),
                          (marker, "1")))
                  for provider, name in choices)
    body = ("<h1>Sign in</h1><p>Choose how to sign in.</p>" + buttons(links)
            + "<p class=note>Your choice is remembered in this browser for 30 days.</p>")
    return document("Sign in", body, look), page_headers(look, HTML)
