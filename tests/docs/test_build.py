"""The documentation builds strictly, every link inside it leads somewhere, the generated
reference pages have exactly the schema's names, and the man pages the Debian package
ships (debian/man/) render cleanly and are what the build makes."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterable
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from gateway.config.route_parts import REDIRECT_FIELDS
from gateway.config.routes import ROUTE_FIELDS
from gateway.config.settings import SETTINGS
from gateway.policy.criteria import CRITERIA
from tests.docs.build import Built

REPO = Path(__file__).resolve().parents[2]
MAN_PAGES = ("gateway.1", "gateway-daemon.8", "gateway.yaml.5")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "id" and value:
                self.ids.add(value)
            elif name == "href" and value and tag == "a":
                self.hrefs.append(value)


def parse(path: Path) -> _Links:
    links = _Links()
    links.feed(path.read_text(encoding="utf-8"))
    return links


def test_html_builds_with_warnings_as_errors(html: Built) -> None:
    """-W --keep-going -n: any warning (a broken cross-reference, a missing heading
    anchor of a page.md#anchor link, a page outside every toctree) fails the build."""
    print(f"docs: html built in {html.seconds:.1f} s")
    pages = [p for p in html.out.rglob("*.html") if "_static" not in p.parts]
    assert len(pages) > 40
    assert html.warnings == ""


def test_every_internal_link_and_anchor_resolves(html: Built) -> None:
    """Every relative link of every page names a file of the site, and its #fragment an
    id in that file. Links with a scheme (https:, mailto:) are not fetched."""
    parsed = {p: parse(p) for p in html.out.rglob("*.html")}
    broken = []
    for page, links in parsed.items():
        for href in links.hrefs:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc:
                continue
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(html.out)}: {href}: no such file")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{page.relative_to(html.out)}: {href}: no such anchor")
    assert broken == []


def ids_with_prefix(path: Path, prefix: str) -> set[str]:
    return {i.removeprefix(prefix) for i in parse(path).ids if i.startswith(prefix)}


def html_ids(names: Iterable[str]) -> set[str]:
    """The ids docutils makes of labels: ``_`` and ``.`` become ``-``."""
    return {re.sub(r"[_.]", "-", n) for n in names}


def test_generated_pages_have_exactly_the_schema(html: Built) -> None:
    """One anchor per setting, route field, redirect field and criterion: a name the
    code has is never missing from the pages, and a name it dropped is never left."""
    reference = html.out / "reference"
    assert ids_with_prefix(reference / "settings.html", "setting-") == html_ids(SETTINGS)
    routes = ids_with_prefix(reference / "routes.html", "field-")
    assert routes == html_ids([*ROUTE_FIELDS, *(f"redirect-{k}" for k in REDIRECT_FIELDS)])
    assert ids_with_prefix(reference / "policy.html", "criterion-") == html_ids(CRITERIA)
    # the schema's text is shown as written: ',<weight>' is no HTML tag
    assert "optionally ',&lt;weight&gt;'" in (reference / "routes.html").read_text()


def man_text(path: Path) -> tuple[str, str]:
    """What `man` shows of a page file (and what it warns), as lintian runs it."""
    env = {**os.environ, "LC_ALL": "C.UTF-8", "MANROFFSEQ": "", "MANWIDTH": "80"}
    result = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z",
                             str(path)], capture_output=True, env=env, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    rendered = subprocess.run(["man", "-l", str(path)], capture_output=True, text=True,
                              env=env, timeout=60, check=True).stdout
    return rendered, result.stderr.decode()


@pytest.fixture
def require_man(require_binary: Callable[[str, str], str]) -> None:
    require_binary("man", "apt-get install -y man-db")


def test_man_pages_render_without_warnings(man: Built, require_man: None) -> None:
    for name in MAN_PAGES:
        text, warnings = man_text(man.out / name)
        assert warnings == "", f"{name}: {warnings}"
        assert re.search(r"^NAME$", text, re.M), name
    yaml5, _ = man_text(man.out / "gateway.yaml.5")
    missing = [k for k in [*SETTINGS, *ROUTE_FIELDS] if not re.search(
        rf"^ +{re.escape(k)}$", yaml5, re.M)]
    assert missing == []


def test_shipped_man_pages_are_current(man: Built, require_man: None) -> None:
    """debian/man/ holds what the build makes (compared as `man` shows them, so that
    another docutils' layout of the same text is not a difference)."""
    stale = []
    for name in MAN_PAGES:
        shipped = REPO / "debian" / "man" / name
        built, _ = man_text(man.out / name)
        if not shipped.exists() or man_text(shipped)[0].split() != built.split():
            stale.append(name)
    assert stale == [], f"debian/man/ is stale ({stale}): run bash scripts/docs.sh"
