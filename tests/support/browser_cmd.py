"""A ``--browser-cmd`` for ``gateway tcp`` tests: signs in at the URL it is given, as a
person would in a browser, with the stdlib ``Browser`` (fast) or, with ``--chromium``,
Debian's headless Chromium driven by ``tests/peers/browser/signin.js``.

    python -m tests.support.browser_cmd --login alice@example.test [--record FILE]
        [--chromium] URL

``--record`` appends one JSON line per run (the URL and where the browser ended), so a
test can count sign-ins and check the page the client showed. Exit 0 when the browser
ended on a 200 page, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from tests.support.browser import Browser

BROWSER_DIR = Path(__file__).resolve().parents[1] / "peers" / "browser"


def with_stdlib(url: str, login: str) -> dict[str, object]:
    reply = Browser().sign_in(url, login)
    return {"url": reply.url, "status": reply.status,
            "text": reply.body.decode("utf-8", "replace")}


def with_chromium(url: str, login: str) -> dict[str, object]:
    result = subprocess.run(["node", "signin.js", url, login], cwd=BROWSER_DIR,
                            capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        return {"url": url, "status": 0, "text": result.stderr[-2000:]}
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    return {"url": seen["url"], "status": 200, "text": seen["text"]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--login", required=True)
    parser.add_argument("--record")
    parser.add_argument("--chromium", action="store_true")
    parser.add_argument("url")
    args = parser.parse_args()
    seen = (with_chromium if args.chromium else with_stdlib)(args.url, args.login)
    shown = str(seen["url"]).split("?", 1)[0]  # the query carries the token: not in logs
    print(f"browser_cmd: {seen['status']} {shown}", flush=True)
    if args.record:
        with open(args.record, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"opened": args.url, **seen}) + "\n")
    return 0 if seen["status"] == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
