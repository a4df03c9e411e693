"""String and string-list matchers as the policy language writes them.

A string matcher is an object of operators (``is``, ``starts_with``, ``ends_with``,
``contains``, ``in``, ``not_in``; all given must hold) or a bare string, number or
boolean (``is``). A string-list matcher is ``{has: VALUE}`` or a bare value (``has``).
Numbers and booleans become the strings IdP claims flatten to (``true``, ``2``). A bare
list is refused: PPL compares it whole and never matches, so ``in:`` is what was meant.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from gateway.policy.nodes import LIST_MATCHERS, STRING_MATCHERS, Has, StringMatch, Strings
from gateway.policy.problems import Problems, did_you_mean

_LISTS = ("in", "not_in")


def show(value: Any) -> str:
    """A configured value as a message quotes it (JSON, at most 80 characters)."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def scalar(value: Any) -> str | None:
    """A string, number or boolean as the string it compares as; ``None`` for anything
    else (a map, a list, null, a date)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    return None


def parse_strings(value: Any, where: str, problems: Problems,
                  fold: Callable[[str], str] | None = None) -> Strings | None:
    """A string matcher; ``fold`` maps every operand (``str.lower`` for e-mail)."""
    if isinstance(value, list):
        problems.error(where, f"a list is not a string: write in: {show(value)} to match "
                              "any of these values")
        return None
    if not isinstance(value, Mapping):
        text = scalar(value)
        if text is None:
            problems.error(where, "expected a string or a string matcher ("
                           f"{', '.join(STRING_MATCHERS)}), got {show(value)}")
            return None
        return Strings((StringMatch("is", (fold(text) if fold else text,)),))
    if not value:
        problems.error(where, "empty string matcher: give one of " + ", ".join(STRING_MATCHERS))
        return None
    matches: list[StringMatch] = []
    ok = True
    for key, operand in value.items():
        match = _one_match(key, operand, f"{where}.{key}", problems, fold)
        if match is None:
            ok = False
        else:
            matches.append(match)
    return Strings(tuple(matches)) if ok else None


def _one_match(key: Any, operand: Any, where: str, problems: Problems,
               fold: Callable[[str], str] | None) -> StringMatch | None:
    if key not in STRING_MATCHERS:
        problems.error(where, "unknown string matcher; use one of "
                              + ", ".join(STRING_MATCHERS) + did_you_mean(key, STRING_MATCHERS))
        return None
    if key in _LISTS:
        if not isinstance(operand, list):
            problems.error(where, f"expected a list of strings, got {show(operand)}")
            return None
        if not operand:
            problems.error(where, "empty list")
            return None
        texts: list[str] = []
        for i, item in enumerate(operand):
            text = scalar(item)
            if text is None:
                problems.error(f"{where}[{i}]", f"expected a string, got {show(item)}")
                return None
            texts.append(fold(text) if fold else text)
        return StringMatch(str(key), tuple(dict.fromkeys(texts)))
    text = scalar(operand)
    if text is None:
        problems.error(where, f"expected a string, got {show(operand)}")
        return None
    return StringMatch(str(key), (fold(text) if fold else text,))


def parse_has(value: Any, where: str, problems: Problems) -> Has | None:
    """A string-list matcher: ``{has: VALUE}`` or a bare VALUE."""
    if isinstance(value, Mapping):
        if len(value) != 1 or next(iter(value)) not in LIST_MATCHERS:
            bad = [k for k in value if k not in LIST_MATCHERS]
            key = bad[0] if bad else ""
            where_key = f"{where}.{key}" if key != "" else where
            hint = (": a list may hold several values, so {is: V} is {has: V} (or "
                    "the bare value)" if key == "is" else did_you_mean(key, LIST_MATCHERS)
                    if key != "" else "")
            problems.error(where_key, "a list matcher takes exactly one operator, has"
                           + hint)
            return None
        where, value = f"{where}.has", value["has"]
    if isinstance(value, list):
        problems.error(where, f"has takes one value, got {show(value)}: to accept any of "
                              "several, put one criterion per value under or:")
        return None
    text = scalar(value)
    if text is None:
        problems.error(where, f"expected a string, got {show(value)}")
        return None
    return Has(text)


def describe_strings(matcher: Strings) -> str:
    """``is a@b``, ``in [GET, HEAD]``, ``starts_with /api, ends_with .json``."""
    parts = []
    for match in matcher.matches:
        if match.op in _LISTS:
            parts.append(f"{match.op} [{', '.join(match.values)}]")
        else:
            parts.append(f"{match.op} {match.values[0]}")
    return ", ".join(parts)
