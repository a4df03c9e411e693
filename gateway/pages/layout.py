"""The frame every gateway page shares: one self-contained HTML document (inline CSS,
no script, no external font), readable on a phone, light or dark as the reader's system
prefers, with the operator's optional branding; and the headers every page is sent with.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

Pairs = tuple[tuple[bytes, bytes], ...]
HTML = b"text/html; charset=utf-8"
JSON = b"application/json"
TEXT = b"text/plain; charset=utf-8"

_CSS = (
    ":root{color-scheme:light dark;--bg:#f5f6f8;--fg:#1b1f24;--muted:#57606a;--card:#fff;"
    "--line:#d0d7de;--accent:#0a58ca;--on-accent:#fff}"
    "@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9da7b3;"
    "--card:#161b22;--line:#30363d;--accent:#58a6ff;--on-accent:#0d1117}}"
    "*{box-sizing:border-box}"
    "body{margin:0;background:var(--bg);color:var(--fg);"
    "font:16px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}"
    "main{max-width:46rem;margin:0 auto;padding:1.5rem 1rem}"
    ".brand{display:flex;align-items:center;gap:.6rem;color:var(--muted);"
    "font-size:.95rem;margin-bottom:1rem}"
    ".brand img{max-height:2rem;max-width:9rem}"
    ".card{background:var(--card);border:1px solid var(--line);border-radius:.6rem;"
    "padding:1.25rem;overflow-wrap:anywhere}"
    "h1{font-size:1.45rem;line-height:1.25;margin:0 0 .25rem}"
    "h2{font-size:1.05rem;margin:1.25rem 0 .4rem}"
    ".code{color:var(--muted);font-size:.9rem;margin:0 0 .75rem}"
    "p{margin:.5rem 0}"
    "dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem;margin:.5rem 0}"
    "dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}"
    "ul{margin:.25rem 0;padding-left:1.25rem}li{overflow-wrap:anywhere}"
    "ul.routes{list-style:none;padding:0}"
    "ul.routes li{padding:.6rem 0;border-top:1px solid var(--line)}"
    "ul.routes li:first-child{border-top:0}ul.routes a{color:var(--accent)}"
    ".tag{font-size:.75rem;color:var(--muted);border:1px solid var(--line);"
    "border-radius:.3rem;padding:0 .35rem;white-space:nowrap}"
    ".note{color:var(--muted);font-size:.9rem;margin:.2rem 0 0}"
    ".actions{display:flex;flex-wrap:wrap;gap:.6rem;margin-top:1.1rem}"
    "form{margin:0}"
    "button{font:inherit;padding:.5rem 1rem;border-radius:.45rem;cursor:pointer;"
    "border:1px solid var(--accent);background:var(--accent);color:var(--on-accent)}"
    "button.secondary,a.button{background:transparent;color:var(--accent)}"
    "a.button{display:inline-block;padding:.5rem 1rem;border-radius:.45rem;"
    "border:1px solid var(--accent);text-decoration:none;text-align:center}"
    ".quote{font-size:.85rem;color:var(--muted);border-top:1px solid var(--line);"
    "margin-top:1.1rem;padding-top:.7rem}"
    "code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;"
    "overflow-wrap:anywhere}"
    "@media (max-width:34rem){main{padding:1rem .6rem}dl{grid-template-columns:1fr}"
    "dd{margin-bottom:.45rem}.actions{flex-direction:column}button,a.button{width:100%}}"
)


@dataclass(frozen=True, slots=True)
class Look:
    """What pages need from configuration: the operator's branding (beyond the
    reference) and the authenticate origin (forms may post there)."""

    product_name: str = ""
    logo_url: str = ""
    auth_origin: str = ""
    # further origins a page's form may end up at through redirects (browsers apply
    # form-action to each redirect of a submission): the provider's sign-out, the
    # destination after it
    form_targets: tuple[str, ...] = ()


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def utc(seconds: float) -> str:
    """``2026-11-26 15:04:05 UTC``: what a person reads out to an administrator."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def document(title: str, body_html: str, look: Look) -> bytes:
    """The page: ``title`` (escaped) as title; ``body_html`` is already escaped."""
    product = look.product_name or "gateway"
    logo = (f'<img src="{esc(look.logo_url)}" alt="">' if look.logo_url else "")
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        '<meta name=color-scheme content="light dark">'
        '<meta name=referrer content="same-origin">'
        f"<title>{esc(title)} · {esc(product)}</title><style>{_CSS}</style></head>"
        f'<body><main><div class=brand>{logo}<span>{esc(product)}</span></div>'
        f'<div class=card>{body_html}</div></main></body></html>'
    ).encode()


def _source(url: str) -> str:
    """A CSP source for an image URL: its origin (``data:`` for inline images)."""
    if url.startswith("data:"):
        return "data:"
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def content_security_policy(look: Look) -> bytes:
    """No script, no fetches, no framing; forms may post here or to the authenticate
    host (sign out, sign in as someone else); the logo's origin when one is set."""
    origins = dict.fromkeys(o for o in (look.auth_origin, *look.form_targets) if o)
    form_action = " ".join(("'self'", *origins))
    policy = f"default-src 'none'; style-src 'unsafe-inline'; form-action {form_action}"
    if look.logo_url:
        policy += f"; img-src {_source(look.logo_url)}"
    return policy.encode("latin-1")


def page_headers(look: Look, content_type: bytes, request_id: str = "") -> Pairs:
    """The headers of every page (HTML, JSON or text): never cached, never framed."""
    out: list[tuple[bytes, bytes]] = [
        (b"content-type", content_type), (b"cache-control", b"no-store"),
        (b"content-security-policy", content_security_policy(look)),
        (b"x-frame-options", b"DENY"), (b"x-content-type-options", b"nosniff"),
        # no URL of a page (sign-in links, SSH tickets) to another origin; and the
        # page's own forms post with its true Origin, which a browser without
        # Sec-Fetch-Site is checked by (no-referrer would make it "null")
        (b"referrer-policy", b"same-origin")]
    if request_id:
        out.append((b"x-request-id", request_id.encode("ascii")))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Action:
    """A button: a form (no script needed) with hidden fields."""

    label: str
    action: str
    method: str = "post"
    fields: tuple[tuple[str, str], ...] = ()
    primary: bool = True


def origin(url: str) -> str:
    """``scheme://host[:port]`` of an http(s) URL, else ""."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme in ("http", "https") and \
        parts.netloc else ""


def button(action: Action) -> str:
    """A GET action is a link styled as a button (no form: nothing for form-action to
    refuse on the way through the provider's redirects); others are forms."""
    if action.method == "get":
        href = action.action + ("?" + urlencode(action.fields) if action.fields else "")
        return f'<a class=button href="{esc(href)}">{esc(action.label)}</a>'
    hidden = "".join(f'<input type=hidden name="{esc(k)}" value="{esc(v)}">'
                     for k, v in action.fields)
    cls = "" if action.primary else " class=secondary"
    return (f'<form method={esc(action.method)} action="{esc(action.action)}">{hidden}'
            f"<button type=submit{cls}>{esc(action.label)}</button></form>")


def buttons(actions: tuple[Action, ...]) -> str:
    return f"<div class=actions>{''.join(button(a) for a in actions)}</div>" if actions else ""


def look_of(options: object) -> Look:
    """The ``Look`` of a configuration snapshot's ``Options``."""
    auth = str(getattr(options, "authenticate_service_url", "") or "")
    parts = urlsplit(auth) if auth else None
    return Look(product_name=str(getattr(options, "branding_product_name", "") or ""),
                logo_url=str(getattr(options, "branding_logo_url", "") or ""),
                auth_origin=f"{parts.scheme}://{parts.netloc}" if parts else "")
