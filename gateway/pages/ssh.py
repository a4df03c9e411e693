"""The pages of an SSH sign-in: the confirmation (which connection asks to use the
person's identity: its address, key fingerprint, route and login) and the done page."""

from __future__ import annotations

from gateway.pages.layout import HTML, Action, Look, Pairs, buttons, document, esc, page_headers


def confirm_ssh(who: str, client: str, fingerprint: str, route: str, login: str,
                action: Action, look: Look) -> tuple[bytes, Pairs]:
    body = ("<h1>Allow this SSH connection?</h1>"
            f"<p>You are signed in as <strong>{esc(who)}</strong>. An SSH connection from "
            f"<code>{esc(client)}</code> with the key <code>{esc(fingerprint)}</code> asks "
            f"to log in as <code>{esc(login)}</code> on the route <code>{esc(route)}</code> "
            "as you.</p><p>Allow it only if you started it yourself: the key can then log "
            "in as you until this session ends.</p>" + buttons((action,)))
    return document("Allow this SSH connection?", body, look), page_headers(look, HTML)


def ssh_signed_in(who: str, look: Look) -> tuple[bytes, Pairs]:
    body = (f"<h1>SSH connection allowed</h1><p>Signed in as <strong>{esc(who)}</strong>. "
            "Return to your terminal; you can close this window.</p>")
    return document("SSH connection allowed", body, look), page_headers(look, HTML)
