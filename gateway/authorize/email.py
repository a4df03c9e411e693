"""Whether the provider's ``email`` claim may stand for the person in a decision.

An address only proves something when it names one mailbox the provider vouches for.
Two ways it does not:

- it is not one addr-spec: ``mallory@evil.example@example.test`` has a last ``@``
  part of ``example.test`` but is no mailbox there (oauth2-proxy GHSA-c5c4-8r6x-56w3);
- the provider says ``email_verified: false``: with self-service sign-up anyone can
  type any address, and that claim says exactly that. An absent ``email_verified`` is
  the provider saying nothing (several never send it): the address is used.

A refused address is no address: the rules that need one do not match, the assertion,
claim headers, directory matching and the user page do not carry it
(``gateway.authorize.caller.caller_of`` leaves it out). Pure functions, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

# Stable reason codes (log fields, the 403 page and tests depend on them).
EMAIL_INVALID = "email-invalid"
EMAIL_UNVERIFIED = "email-unverified"

# RFC 5322 dot-atom: atext runs joined by single dots. Non-ASCII letters pass (RFC 6531
# addresses); what is refused is what addr-spec does not allow unquoted: spaces,
# controls, ``"(),:;<>@[\\]``. A quoted local part is refused too (it is how a second
# ``@`` hides in a local part, and no provider issues one to a person).
_LOCAL = re.compile(r"[^\x00-\x20\x7f\"(),:;<>@\[\\\].]+(?:\.[^\x00-\x20\x7f\"(),:;<>@\[\\\]."
                    r"]+)*")
# Characters no mailbox shows a person: controls, format characters (zero-width, bidi
# overrides), separators. An address holding one reads as another in a log or page.
_INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})
# A host-name label once IDNA-encoded: letters, digits, inner hyphens, at most 63.
_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
MAX_ADDRESS = 254  # RFC 5321's path limit less its angle brackets
MAX_LOCAL = 64


def is_mailbox(address: str) -> bool:
    """Whether ``address`` is one addr-spec: exactly one ``@``, a non-empty dot-atom
    local part, and a domain that is a valid host name (labels of letters, digits and
    inner hyphens, IDNs accepted; no trailing dot, no address literal)."""
    if not address or len(address) > MAX_ADDRESS or address.count("@") != 1:
        return False
    local, _, domain = address.partition("@")
    if len(local) > MAX_LOCAL or _LOCAL.fullmatch(local) is None:
        return False
    if not local.isascii() and any(unicodedata.category(c) in _INVISIBLE for c in local):
        return False
    return is_host_name(domain)


def is_host_name(domain: str) -> bool:
    """A DNS host name of one or more labels (``localhost`` included), at most 253
    octets once IDNA-encoded."""
    if not domain or domain.endswith("."):
        return False
    try:
        ascii_name = domain.encode("idna").decode("ascii").lower()
        unicode_name = ascii_name.encode("ascii").decode("idna")
    except UnicodeError:  # an empty or over-long label, or not encodable at all
        return False
    # IDNA maps some characters away (a soft hyphen, a fullwidth dot): the name as sent
    # must be the name it encodes, in its ASCII or its Unicode form, or an app that
    # normalises it would read another domain than the one that was checked.
    if domain.lower() not in (ascii_name, unicode_name):
        return False
    if len(ascii_name) > 253:
        return False
    return all(_LABEL.fullmatch(label) for label in ascii_name.split("."))


def provider_unverified(claims: Mapping[str, tuple[str, ...]]) -> bool:
    """Whether the (flattened) claims say ``email_verified: false``. Some providers send
    the boolean as a string; both flatten to ``"false"``."""
    return any(value.lower() == "false" for value in claims.get("email_verified", ()))


def email_refusal(address: str, claims: Mapping[str, tuple[str, ...]],
                  allow_unverified: bool) -> str:
    """Why ``address`` may not be used for decisions (a reason code), or ``""`` when it
    may (or there is none to refuse)."""
    if not address:
        return ""
    if not is_mailbox(address):
        return EMAIL_INVALID
    if not allow_unverified and provider_unverified(claims):
        return EMAIL_UNVERIFIED
    return ""


REFUSAL_TEXT = {
    EMAIL_INVALID: "your provider sent an e-mail address that is not one valid address",
    EMAIL_UNVERIFIED: "your provider has not verified this address",
}
