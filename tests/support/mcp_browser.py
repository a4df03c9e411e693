"""The person's browser in an MCP client's authorization: the command an MCP client driver
(``mcp_client_py.py``, ``tests/peers/mcp/client.mjs``) runs with the authorization URL,
as a desktop client opens the system browser. It signs in at the identity provider,
answers the gateway's consent page (``/.gateway/mcp/consent``) and follows the redirect to
the client's loopback callback, with the stdlib ``Browser`` (fast) or, with
``--chromium``, Debian's headless Chromium (``tests/peers/browser/mcp_consent.js``).

    python -m tests.support.mcp_browser --login alice@example.test [--chromium]
        [--deny] [--record FILE] URL

``--deny`` presses the consent page's deny button. ``--record`` appends one JSON line per
run (the URL opened, the consent page's text, where the browser ended). ``--cookies``
writes the browser's cookies at the end (``{host: {name: value}}``), so that a test can
go on as the same person in the same browser (sign out, revoke a consent). Exit 0 when the
browser ended on the client's callback with a 200 answer, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode, urljoin, urlsplit

from tests.support.browser import Browser, Reply

BROWSER_DIR = Path(__file__).resolve().parents[1] / "peers" / "browser"
APPROVE = re.compile(r"allow|approve|accept|authori[sz]e|grant|yes", re.IGNORECASE)
REFUSE = re.compile(r"deny|refuse|decline|cancel|reject|no\b", re.IGNORECASE)


class ConsentForms(HTMLParser):
    """Every form with its inputs and its submit buttons (name, value, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, object]] = []
        self._button: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": a.get("action", ""), "method":
                               a.get("method", "get").lower(), "fields": {}, "buttons": []})
        elif not self.forms:
            return
        elif tag == "input" and a.get("type", "text").lower() == "submit":
            self._buttons().append({"name": a.get("name", ""), "value": a.get("value", ""),
                                    "text": a.get("value", "")})
        elif tag == "input" and a.get("name"):
            if a.get("type", "").lower() in ("checkbox", "radio") and "checked" not in a:
                return
            fields = self.forms[-1]["fields"]
            assert isinstance(fields, dict)
            fields[a["name"]] = a.get("value", "")
        elif tag == "button" and a.get("type", "submit").lower() == "submit":
            self._button = {"name": a.get("name", ""), "value": a.get("value", ""), "text": ""}
            self._buttons().append(self._button)

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            self._button["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "button":
            self._button = None

    def _buttons(self) -> list[dict[str, str]]:
        buttons = self.forms[-1]["buttons"]
        assert isinstance(buttons, list)
        return buttons


def consent_forms(reply: Reply) -> list[dict[str, object]]:
    parser = ConsentForms()
    parser.feed(reply.body.decode("utf-8", "replace"))
    return [f for f in parser.forms if f["method"] == "post"
            and "/mcp/consent" in urljoin(reply.url, str(f["action"]))]


def answer_consent(browser: Browser, reply: Reply, approve: bool, stop: str | None = None
                   ) -> Reply:
    """Press the consent page's approve (or deny) button (a form of its own, or one of a
    form's buttons), then follow the redirects to the client's callback (or up to a URL
    starting with ``stop``, not fetched)."""
    forms = consent_forms(reply)
    if not forms:
        raise SystemExit(f"mcp_browser: no consent form at {reply.url.split('?')[0]} "
                         f"({reply.status}): {reply.body[:600]!r}")

    def wanted(says: str) -> bool:
        if approve:
            return bool(APPROVE.search(says)) and not REFUSE.search(says)
        return bool(REFUSE.search(says))

    for form in forms:
        fields: dict[str, str] = dict(form["fields"])  # type: ignore[call-overload]
        buttons: list[dict[str, str]] = form["buttons"]  # type: ignore[assignment]
        decision = fields.get("decision", "")
        for button in buttons:
            if wanted(f"{decision} {button['name']} {button['value']} {button['text']}"):
                if button["name"]:
                    fields[button["name"]] = button["value"]
                return browser.follow(urljoin(reply.url, str(form["action"])), "POST",
                                      urlencode(fields).encode(), stop=stop)
    raise SystemExit(f"mcp_browser: no {'approve' if approve else 'deny'} button in {forms}")


def with_stdlib(url: str, login: str, approve: bool) -> dict[str, object]:
    browser = Browser()
    page = browser.sign_in(url, login)
    consent_text = page.body.decode("utf-8", "replace")
    if urlsplit(page.url).path.rstrip("/").endswith("/callback"):
        end = page  # consent remembered: the gateway went straight back to the client
        consent_text = ""
    else:
        end = answer_consent(browser, page, approve)
    return {"url": end.url, "status": end.status, "consent": consent_text,
            "text": end.body.decode("utf-8", "replace")[:2000], "cookies": browser.cookies}


def with_chromium(url: str, login: str, approve: bool) -> dict[str, object]:
    env = {**os.environ, "DECISION": "approve" if approve else "deny"}
    result = subprocess.run(["node", "mcp_consent.js", url, login], cwd=BROWSER_DIR,
                            capture_output=True, text=True, timeout=90, check=False, env=env)
    if result.returncode != 0:
        return {"url": url, "status": 0, "consent": "", "text": result.stderr[-2000:]}
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    jar: dict[str, dict[str, str]] = {}
    for cookie in seen["cookies"]:
        jar.setdefault(cookie["domain"].lstrip("."), {})[cookie["name"]] = cookie["value"]
    return {"url": seen["url"], "status": 200 if seen["ok"] else 0,
            "consent": seen["consent"], "text": seen["text"], "cookies": jar}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--login", required=True)
    parser.add_argument("--record")
    parser.add_argument("--chromium", action="store_true")
    parser.add_argument("--deny", action="store_true")
    parser.add_argument("--cookies")
    parser.add_argument("url")
    args = parser.parse_args()
    seen = (with_chromium if args.chromium else with_stdlib)(args.url, args.login,
                                                            not args.deny)
    ended = urlsplit(str(seen["url"]))
    print(f"mcp_browser: {seen['status']} {ended.scheme}://{ended.netloc}{ended.path}",
          flush=True)
    cookies = seen.pop("cookies", {})
    if args.cookies:
        Path(args.cookies).write_text(json.dumps(cookies))
    if args.record:
        with open(args.record, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"opened": args.url, **seen}) + "\n")
    at_callback = ended.hostname == "127.0.0.1" and ended.path == "/callback"
    return 0 if seen["status"] == 200 and at_callback else 1


if __name__ == "__main__":
    sys.exit(main())
