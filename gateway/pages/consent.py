"""The consent page of an MCP client's authorization: who asks (the client's name and
where its metadata is), where its codes go (the redirect URI's host, which the MCP
text requires shown; a loopback one warned about: any program on a computer can
listen there), the route and what the client may do there."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.pages.layout import HTML, Action, Look, Pairs, buttons, document, esc, page_headers


@dataclass(frozen=True, slots=True)
class ConsentView:
    who: str
    client_name: str
    client_id: str
    client_host: str  # the metadata document's host, or "" for a registered client
    redirect_host: str
    loopback: bool
    resource: str
    route_name: str
    remembered: bool = False  # allowed before; asked again (a loopback redirect URI)


def consent_page(view: ConsentView, allow: Action, deny: Action, look: Look
                 ) -> tuple[bytes, Pairs]:
    source = (f"its metadata document is at <code>{esc(view.client_id)}</code>"
              if view.client_host else
              f"it registered itself with this gateway as <code>{esc(view.client_id)}</code>"
              " (nothing vouches for its name)")
    again = ("<p>You allowed this client before. It is asked again each time because its "
             "answer goes to this computer.</p>" if view.remembered else "")
    warning = ("<p><strong>The client receives the answer on this computer "
               f"(<code>{esc(view.redirect_host)}</code>): any program running here could. "
               "Allow it only if you started it yourself.</strong></p>"
               if view.loopback else "")
    body = (f"<h1>Allow {esc(view.client_name)} to use {esc(view.route_name)}?</h1>"
            f"<p>You are signed in as <strong>{esc(view.who)}</strong>. The MCP client "
            f"<strong>{esc(view.client_name)}</strong> asks to use the MCP server "
            f"<code>{esc(view.resource)}</code> as you; {source}. Its answer goes to "
            f"<code>{esc(view.redirect_host)}</code>.</p>{warning}{again}"
            "<p>It may make every request this server's policy allows you, and no other, "
            "until you sign out, your session ends, or you revoke it on your account page "
            "(<code>/.gateway/</code>).</p>" + buttons((allow, deny)))
    return (document(f"Allow {view.client_name}?", body, look), page_headers(look, HTML))
