"""The sign-out confirmation (a GET without the CSRF token shows it) and the signed-out
page: who is signed out, and where they go afterwards."""

from __future__ import annotations

from gateway.pages.layout import HTML, Action, Look, Pairs, buttons, document, esc, page_headers


def confirm_sign_out(who: str, destination: str, provider_too: bool, action: Action,
                     look: Look) -> tuple[bytes, Pairs]:
    """``destination``: where the browser goes afterwards ("" = a signed-out page)."""
    after = (f"Afterwards you will be sent to <code>{esc(destination)}</code>."
             if destination else "Afterwards you will see a page confirming it.")
    if provider_too:
        after += " You will also be signed out of the identity provider."
    body = (f"<h1>Sign out?</h1><p>You are signed in as <strong>{esc(who)}</strong>. "
            "Signing out ends this session on every site behind this gateway.</p>"
            f"<p>{after}</p>{buttons((action,))}")
    return document("Sign out?", body, look), page_headers(look, HTML)


def signed_out(who: str, look: Look) -> tuple[bytes, Pairs]:
    body = (f"<h1>Signed out</h1><p><strong>{esc(who)}</strong> is signed out.</p>"
            "<p>You can close this window.</p>")
    return document("Signed out", body, look), page_headers(look, HTML)
