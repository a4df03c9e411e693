"""Formatting shared by the sections' reports."""

from __future__ import annotations

from typing import Any


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def fmt_rss(kib: float | None) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f} MiB"


def fmt_paired(result: dict[str, Any], lead: str = "; ") -> str:
    """The ratios of back-to-back runs (``Bench.interleaved``), to see the spread,
    after ``lead``; "" when there are none."""
    paired = result.get("paired")
    return f"{lead}paired runs {', '.join(f'{x:.3f}' for x in paired)}" if paired else ""


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"
