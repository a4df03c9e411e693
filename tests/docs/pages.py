"""Blocks of the documentation's pages that the tests run: a fenced block right after a
``% test: NAME`` line (a MyST comment, invisible on the page) in ``docs/**/*.md``."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^% test: (?P<name>[a-z0-9-]+)\n```[a-z]*\n(?P<body>.*?)^```$", re.M | re.S)


def marked_blocks(page: str) -> dict[str, str]:
    """NAME -> the text of its block, for the page ``docs/<page>``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    blocks: dict[str, str] = {}
    for match in BLOCK.finditer(text):
        assert match["name"] not in blocks, f"{page}: two blocks named {match['name']}"
        blocks[match["name"]] = match["body"]
    return blocks
