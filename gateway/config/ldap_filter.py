"""LDAP search filters (RFC 4515 text) parsed to ldaptor's wire objects.

ldaptor's filter grammar uses pyparsing's old camelCase names, which pyparsing 3.3 reports
as deprecated at import; the warnings say nothing about our code, so they are silenced
here, once.
"""

from __future__ import annotations

import warnings
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from ldaptor import ldapfilter


def parse_filter(text: str) -> Any:
    """The wire form of ``text``; a filter without outer parentheses gets them.
    Raises ValueError saying where the filter is wrong."""
    text = text.strip()
    if not text.startswith("("):
        text = f"({text})"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ldapfilter.parseFilter(text)
    except ldapfilter.InvalidLDAPFilter as exc:
        reason = str(exc).removeprefix("Invalid LDAP filter: ")
        raise ValueError(f"not a valid LDAP filter ({reason})") from None
