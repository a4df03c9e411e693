"""``/.gateway/``: who the gateway thinks you are. E-mail, user id, groups (names and the
directory's ids), the claims routes can use, when the session started and ends, the
identity provider; buttons to sign out and to sign in as someone else. JSON of the same
for scripts (``Accept: application/json``). Never a token, cookie or secret."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gateway.pages.layout import (
    HTML,
    JSON,
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

# ID-token claims about the token itself, not the person: not something a route uses
_TOKEN_CLAIMS = frozenset({"nonce", "at_hash", "c_hash", "s_hash", "sid", "jti", "azp",
                           "aud", "iat", "exp", "nbf", "auth_time", "acr", "amr", "iss"})


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    id: str = ""  # the directory's id (LDAP: the DN); empty for groups from a claim


@dataclass(frozen=True, slots=True)
class AllowedClient:
    """An MCP client the person allowed (``gateway.mcp_oauth``), with the button that
    revokes it."""

    name: str
    client_id: str
    resources: tuple[str, ...]
    granted_at: float
    revoke: Action


@dataclass(frozen=True, slots=True)
class Profile:
    email: str
    user_id: str
    name: str
    groups: tuple[Group, ...]
    claims: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({}))
    started: float = 0.0
    expires: float = 0.0
    identity_provider: str = ""
    host: str = ""
    # The address the provider sent when routes may not use it (``email`` is then
    # empty), with the reason code and its sentence (``gateway.authorize.email``).
    email_claimed: str = ""
    email_refused: str = ""
    email_refused_text: str = ""
    clients: tuple[AllowedClient, ...] = ()


def person_claims(claims: Mapping[str, tuple[str, ...]]) -> dict[str, list[str]]:
    """The claims routes can use (``allowed_idp_claims``, claim headers), sorted, without
    the ones that describe the ID token itself."""
    return {k: list(v) for k, v in sorted(claims.items()) if k not in _TOKEN_CLAIMS}


def profile_json(profile: Profile) -> bytes:
    doc = {
        "email": profile.email, "user_id": profile.user_id, "name": profile.name,
        "groups": [{"name": g.name, "id": g.id} for g in profile.groups],
        "claims": person_claims(profile.claims),
        "session": {"started": iso(profile.started), "expires": iso(profile.expires),
                    "started_unix": int(profile.started),
                    "expires_unix": int(profile.expires)},
        "identity_provider": profile.identity_provider,
    }
    if profile.clients:
        doc["mcp_clients"] = [{"client_id": c.client_id, "name": c.name,
                               "resources": list(c.resources), "allowed": iso(c.granted_at)}
                              for c in profile.clients]
    if profile.email_refused:
        doc["email_not_used"] = {"claimed": profile.email_claimed,
                                 "reason": profile.email_refused,
                                 "why": profile.email_refused_text}
    return json.dumps(doc, indent=1).encode() + b"\n"


def _groups_html(groups: tuple[Group, ...]) -> str:
    if not groups:
        return "<p>No groups.</p>"
    items = []
    for g in groups:
        extra = f" <code>{esc(g.id)}</code>" if g.id and g.id != g.name else ""
        items.append(f"<li>{esc(g.name)}{extra}</li>")
    return f"<ul>{''.join(items)}</ul>"


def _claims_html(claims: Mapping[str, tuple[str, ...]]) -> str:
    shown = person_claims(claims)
    if not shown:
        return "<p>No claims.</p>"
    rows = "".join(f"<dt><code>{esc(k)}</code></dt><dd>{esc(', '.join(v))}</dd>"
                   for k, v in shown.items())
    return f"<dl>{rows}</dl>"


def _clients_html(clients: tuple[AllowedClient, ...]) -> str:
    if not clients:
        return ""
    items = "".join(
        f"<li><strong>{esc(c.name)}</strong> (<code>{esc(c.client_id)}</code>) on "
        + ", ".join(f"<code>{esc(r)}</code>" for r in c.resources)
        + f", allowed {esc(utc(c.granted_at))}{buttons((c.revoke,))}</li>" for c in clients)
    return f"<h2>MCP clients you allowed</h2><ul>{items}</ul>"


def profile_html(profile: Profile, look: Look, actions: tuple[Action, ...]) -> bytes:
    who = profile.email or profile.user_id
    email = profile.email or "—"
    if profile.email_refused:
        email = (f"— (routes do not use {profile.email_claimed}: "
                 f"{profile.email_refused_text})")
    rows = [("E-mail", email), ("User id", profile.user_id or "—")]
    if profile.name:
        rows.append(("Name", profile.name))
    rows += [("Signed in", utc(profile.started)), ("Session ends", utc(profile.expires)),
             ("Identity provider", profile.identity_provider or "—")]
    details = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in rows)
    body = (f"<h1>Signed in as {esc(who)}</h1>"
            + (f"<p class=code>on {esc(profile.host)}</p>" if profile.host else "")
            + f"<dl>{details}</dl><h2>Groups</h2>{_groups_html(profile.groups)}"
            f"<h2>Claims</h2>{_claims_html(profile.claims)}{_clients_html(profile.clients)}"
            f"{buttons(actions)}")
    return document("Who am I", body, look)


def render_profile(profile: Profile, look: Look, actions: tuple[Action, ...], *,
                   as_json: bool) -> tuple[bytes, Pairs]:
    if as_json:
        return profile_json(profile), page_headers(look, JSON)
    return profile_html(profile, look, actions), page_headers(look, HTML)
