"""Sphinx configuration of the gateway's documentation (docs/development/docs.md says why
Sphinx and how the build is checked)."""

from __future__ import annotations

import email.utils
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(DOCS / "_ext"), str(ROOT)]

from gateway import __version__  # noqa: E402

project = "gateway"
author = "gateway developers"
version = release = __version__


def _release_date() -> str:
    """The date of the newest debian/changelog entry: the man pages carry it, so a
    rebuild of the same release gives the same bytes (no build date)."""
    text = (ROOT / "debian" / "changelog").read_text(encoding="utf-8")
    stamp = re.search(r"^ -- .+?  (.+)$", text, re.M)
    assert stamp is not None, "debian/changelog has no trailer line"
    return email.utils.parsedate_to_datetime(stamp[1]).strftime("%Y-%m-%d")


today = _release_date()

extensions = ["myst_parser", "gateway_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "ARCHITECTURE.md"]
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# Every cross-reference must resolve (sphinx-build -n); links to URLs are not fetched.
nitpicky = True
# Options such as --config stay two hyphens (and quotes stay as typed) on every page; with
# it off, the HTML build's doctrees also serve the man build unchanged.
smartquotes = False
suppress_warnings: list[str] = []

html_theme = "alabaster"
html_title = f"gateway {release}"
html_static_path: list[str] = []
html_last_updated_fmt = None
html_show_sourcelink = False

# Sphinx's man builder: installed by the Debian package (debian/gateway.manpages).
man_pages = [
    ("reference/man/gateway", "gateway",
     "identity-aware access proxy: check a configuration, explain a policy, open TCP "
     "tunnels", [], 1),
    ("reference/man/gateway-daemon", "gateway-daemon",
     "the gateway daemon, run as twistd gateway", [], 8),
    ("reference/man/gateway.yaml", "gateway.yaml",
     "configuration file of the gateway", [], 5),
]
man_show_urls = False
man_make_section_directory = False
