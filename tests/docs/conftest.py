"""The documentation is built once per test session: HTML with every page read afresh,
then the man pages from the same doctrees."""

from __future__ import annotations

import pytest

from tests.docs.build import Built, sphinx


@pytest.fixture(scope="session")
def html(tmp_path_factory: pytest.TempPathFactory) -> Built:
    out = tmp_path_factory.mktemp("docs")
    return sphinx("html", out / "html", out / "doctrees", fresh=True)


@pytest.fixture(scope="session")
def man(html: Built) -> Built:
    return sphinx("man", html.out.parent / "man", html.out.parent / "doctrees", fresh=False)
