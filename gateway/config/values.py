"""Plain parsers for the value syntaxes the reference uses; no I/O.

Each returns the parsed value or raises ``ValueError`` whose text is the user-facing
reason (the caller prefixes the key path).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit

import yaml

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_TRUE = frozenset({"1", "t", "true", "yes", "on"})
_FALSE = frozenset({"0", "f", "false", "no", "off"})
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
NESTED_TOO_DEEPLY = "values are nested too deeply"


# libyaml's scanner when PyYAML has it: the pure-Python one takes time quadratic in the
# nesting depth (a small file of "[[[[..." holds the reactor thread for seconds on a
# reload); libyaml stops at depth 1000.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_load(text: str) -> Any:
    """``yaml.safe_load``; nesting deeper than Python's recursion limit (such as
    ``[[[[...``) is a ``yaml.YAMLError`` like any other unreadable text, not a crash."""
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)
    except RecursionError:
        raise yaml.YAMLError(NESTED_TOO_DEEPLY) from None


def parse_duration(text: str) -> float:
    """Parse a Go duration (``300ms``, ``1.5h``, ``1h45m``, ``0``) into seconds.

    Negative durations are refused: no setting of the gateway can use one.
    """
    s = text.strip()
    if s in ("0", "+0"):
        return 0.0
    if s.startswith("-"):
        raise ValueError(f"duration {text!r} is negative; use a positive value such as 30s")
    if s.startswith("+"):
        s = s[1:]
    if not s:
        raise ValueError("duration is empty; use a value such as 30s, 5m or 1h45m")
    total = 0.0
    pos = 0
    for match in _DURATION_PART.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(s):
        raise ValueError(
            f"invalid duration {text!r}; use decimal numbers with units ns, us, ms, s, m, h "
            "(for example 300ms, 30s, 1.5h, 1h45m)"
        )
    return total


def format_duration(seconds: float) -> str:
    """Render seconds as a compact Go-style duration (``1h45m``, ``300ms``, ``0s``)."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    out = []
    whole = int(seconds)
    frac = seconds - whole
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        out.append(f"{hours}h")
    if minutes:
        out.append(f"{minutes}m")
    if secs or frac:
        out.append(f"{secs + frac:g}s")
    return "".join(out)


def parse_bool(value: object) -> bool:
    """Accept YAML booleans and Go's ``strconv.ParseBool`` spellings (plus yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ValueError(f"{value!r} is not a boolean; use true or false")


MAX_WORKERS = 256


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask, as ``nproc`` counts them)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_workers(value: object) -> int:
    """``workers``: a count from 1 to MAX_WORKERS, or ``auto`` (one per available CPU)."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return min(available_cpus(), MAX_WORKERS)
    number = int(value) if isinstance(value, str) and value.strip().isdigit() else value
    if isinstance(number, bool) or not isinstance(number, int) or not (
            1 <= number <= MAX_WORKERS):
        raise ValueError(f"must be a number of processes from 1 to {MAX_WORKERS}, or auto")
    return number


def parse_list(value: object) -> tuple[str, ...]:
    """A list of strings: a YAML/JSON list, or a comma-separated string (env form)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                loaded = yaml_load(text)
            except yaml.YAMLError as exc:
                raise ValueError(f"cannot parse list {value!r}: {exc}") from None
            return parse_list(loaded)
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if isinstance(value, list | tuple):
        out = []
        for item in value:
            if isinstance(item, dict | list | tuple) or item is None:
                raise ValueError(f"list item {item!r} is not a string")
            out.append(str(item).strip() if not isinstance(item, bool) else str(item).lower())
        return tuple(out)
    raise ValueError(f"{value!r} is not a list of strings")


def parse_map(value: object, pair_separator: str = "=") -> dict[str, str]:
    """A string-to-string map: a YAML/JSON mapping, or ``k=v,k2=v2`` (env form).

    ``pair_separator`` is ``:`` for header maps (``Name:value,...``). A string holding a
    JSON object or a YAML mapping is accepted too, as the reference allows for env values.
    """
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        loaded: Any = None
        try:
            loaded = yaml_load(text)
        except yaml.YAMLError:
            loaded = None
        if isinstance(loaded, dict):
            return parse_map(loaded, pair_separator)
        out: dict[str, str] = {}
        for pair in text.split(","):
            name, sep, val = pair.partition(pair_separator)
            if not sep or not name.strip():
                raise ValueError(f"failed to decode map from {value!r}")
            out[name.strip()] = val.strip()
        return out
    if isinstance(value, Mapping):
        result: dict[str, str] = {}
        for key, val in value.items():
            if isinstance(val, dict | list | tuple) or val is None:
                raise ValueError(f"value of {key!r} must be a string, got {val!r}")
            result[str(key)] = str(val).lower() if isinstance(val, bool) else str(val)
        return result
    raise ValueError(f"{value!r} is not a map of strings")


def decode_base64(text: str) -> bytes:
    """Standard or URL-safe base64, padding optional."""
    compact = text.strip()
    padded = compact + "=" * (-len(compact) % 4)
    alphabet = "-_" if ("-" in compact or "_" in compact) else "+/"
    try:
        return base64.b64decode(padded, altchars=alphabet.encode(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"cryptutil: invalid base64: {exc}") from None


def decode_secret(text: str, name: str) -> bytes:
    """A 256-bit key in base64, with the original's messages for the usual mistakes."""
    if text == "":
        raise ValueError(f"config: {name} cannot be empty")
    if any(ch.isspace() for ch in text):
        raise ValueError(f"config: {name} contains whitespace")
    raw = decode_base64(text)
    if len(raw) != 32:
        raise ValueError(f"cryptutil: got {len(raw)} bytes but want 32")
    return raw


def split_url(value: str) -> SplitResult:
    """Parse a URL that must carry a scheme and a host name.

    The messages follow the original product's (``... url does not contain a valid
    scheme``); its text said "does contain", which reads as the opposite of the problem.
    """
    if value == "":
        raise ValueError("url cannot be empty")
    if "://" not in value:
        raise ValueError(f"{value} url does not contain a valid scheme")
    scheme = value.split("://", 1)[0]
    if not _SCHEME.match(scheme):
        raise ValueError(f"{value} url does not contain a valid scheme")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a bad port
    except ValueError as exc:
        raise ValueError(f"{value} url is invalid: {exc}") from None
    if not parts.hostname:
        raise ValueError(f"{value} url does not contain a valid hostname")
    return parts


def is_loopback_host(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1): a URL's host (brackets
    already removed, as ``urlsplit`` gives it) that never leaves the machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_address(value: str) -> tuple[str, int]:
    """``host:port``, ``:port`` or ``[v6]:port`` into (host, port); surrounding quotes dropped."""
    text = value.strip().strip("\"'")
    if text.startswith("["):
        host, sep, port = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"address {value!r} must be host:port, e.g. [::1]:443")
    else:
        host, sep, port = text.rpartition(":")
        if not sep:
            raise ValueError(f"address {value!r} must be host:port, e.g. :443 or 127.0.0.1:8443")
        if ":" in host:
            raise ValueError(f"address {value!r}: put an IPv6 host in brackets, e.g. [::1]:443")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address {value!r} has an invalid port; use 0-65535")
    return host, int(port)


def load_structured(text: str, what: str) -> Any:
    """YAML (a superset of JSON) text into Python data, with a short error."""
    try:
        return yaml_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"cannot parse {what} as YAML or JSON: {exc}") from None


def dumps_canonical(data: Any) -> str:
    """Stable JSON used for checksums."""
    return json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
