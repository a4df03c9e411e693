"""``client_certificate``: presence (``true``), or a certificate matcher.

The matcher's keys, all of which must hold: ``fingerprint`` (SHA-256 of the DER; the
long form ``17:85:...:04`` in upper case, or the short form of 64 lower-case hex
digits, as PPL accepts them), ``spki_hash`` (base64 SHA-256 of the SubjectPublicKeyInfo),
each one value or a list of them; ``san_email``, ``san_dns``, ``san_uri`` (string
matchers, true when some name of that type in the certificate satisfies them).
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import Any

from gateway.policy.nodes import Certificate, Strings
from gateway.policy.operands import parse_strings, show
from gateway.policy.problems import Problems, did_you_mean

CERT_KEYS = ("fingerprint", "spki_hash", "san_email", "san_dns", "san_uri")
_LONG = re.compile(r"[0-9A-F]{2}(?::[0-9A-F]{2}){31}")
_SHORT = re.compile(r"[0-9a-f]{64}")


def parse_certificate(value: Any, where: str, problems: Problems) -> Certificate | None:
    if value is True:
        return Certificate()
    if not isinstance(value, Mapping) or not value:
        problems.error(where, "expected true (a certificate was presented) or a matcher "
                              f"with {', '.join(CERT_KEYS)}, got {show(value)}")
        return None
    parts: dict[str, Any] = {}
    ok = True
    for key, operand in value.items():
        at = f"{where}.{key}"
        part: tuple[str, ...] | Strings | None
        if key == "fingerprint":
            part = _each(operand, at, problems, _fingerprint)
        elif key == "spki_hash":
            part = _each(operand, at, problems, _spki_hash)
        elif key in ("san_email", "san_dns", "san_uri"):
            part = parse_strings(operand, at, problems)
        else:
            problems.error(at, "unknown certificate matcher key; use one of "
                           + ", ".join(CERT_KEYS) + did_you_mean(key, CERT_KEYS))
            part = None
        if part is None:
            ok = False
        else:
            parts["fingerprints" if key == "fingerprint" else
                  "spki_hashes" if key == "spki_hash" else str(key)] = part
    return Certificate(**parts) if ok else None


def _each(value: Any, where: str, problems: Problems,
          one: Any) -> tuple[str, ...] | None:
    items = value if isinstance(value, list) else [value]
    if not items:
        problems.error(where, "empty list")
        return None
    out: list[str] = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]" if isinstance(value, list) else where
        canonical = one(item, at, problems)
        if canonical is None:
            return None
        out.append(canonical)
    return tuple(dict.fromkeys(out))


def _fingerprint(value: Any, where: str, problems: Problems) -> str | None:
    if isinstance(value, str):
        if _SHORT.fullmatch(value):
            return value
        if _LONG.fullmatch(value):
            return value.replace(":", "").lower()
    problems.error(where, f"not a SHA-256 certificate fingerprint: {show(value)}; use "
                          "32 upper-case hex bytes separated by colons (AA:BB:...) or 64 "
                          "lower-case hex digits")
    return None


def _spki_hash(value: Any, where: str, problems: Problems) -> str | None:
    if isinstance(value, str):
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 32:
            return base64.b64encode(raw).decode()
    problems.error(where, f"not an SPKI hash: {show(value)}; use the base64 SHA-256 of the "
                          "certificate's SubjectPublicKeyInfo (44 characters ending in =)")
    return None
