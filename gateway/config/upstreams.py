"""Route upstreams: ``to`` URLs with weights, load-balancer and health-check settings.

The reference names the objects (``lb_policy``, ``*_lb_config``, ``health_checks``,
``outlier_detection``) but not their fields; the fields here follow the data plane the
original embedded (Envoy), with the same names and defaults, so existing configs carry over.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.config.errors import Problems
from gateway.config.values import parse_duration

LB_POLICIES = ("ROUND_ROBIN", "LEAST_REQUEST", "RING_HASH", "RANDOM", "MAGLEV")
_UPSTREAM_SCHEMES = ("http", "https", "tcp")
_MAX_WEIGHT = 2**32 - 1


@dataclass(frozen=True, slots=True)
class Upstream:
    """One ``to`` entry: the URL without its weight suffix."""

    url: str
    scheme: str
    host: str
    port: int
    path: str
    weight: int | None


@dataclass(frozen=True, slots=True)
class LeastRequestConfig:
    choice_count: int = 2


@dataclass(frozen=True, slots=True)
class RingHashConfig:
    minimum_ring_size: int = 1024
    maximum_ring_size: int = 8 * 1024 * 1024
    hash_function: str = "XX_HASH"


@dataclass(frozen=True, slots=True)
class MaglevConfig:
    table_size: int = 65537


@dataclass(frozen=True, slots=True)
class HealthCheck:
    """One entry of ``health_checks``; ``kind`` is ``http``, ``tcp`` or ``grpc``."""

    kind: str
    timeout: float = 5.0
    interval: float = 10.0
    unhealthy_threshold: int = 2
    healthy_threshold: int = 1
    path: str = "/"
    host: str = ""
    expected_statuses: tuple[tuple[int, int], ...] = ((200, 201),)
    send: bytes = b""
    receive: tuple[bytes, ...] = ()
    service_name: str = ""
    authority: str = ""


@dataclass(frozen=True, slots=True)
class OutlierDetection:
    consecutive_5xx: int = 5
    interval: float = 10.0
    base_ejection_time: float = 30.0
    max_ejection_percent: int = 10
    enforcing_consecutive_5xx: int = 100


def parse_to(value: object, from_tcp: bool, path: str, problems: Problems) -> tuple[Upstream, ...]:
    """Parse ``to`` (string or list), with the all-or-none weight rule of the original."""
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, list):
        items = list(value)
    else:
        problems.error(path, f"must be a URL or a list of URLs, got {value!r}")
        return ()
    if not items:
        problems.error(path, "url list is empty")
        return ()
    out: list[Upstream] = []
    for index, item in enumerate(items):
        where = f"{path}[{index}]" if isinstance(value, list) else path
        if not isinstance(item, str):
            problems.error(where, f"must be a URL string, got {item!r}")
            continue
        upstream = _parse_one(item.strip(), where, problems)
        if upstream is None:
            continue
        if from_tcp and upstream.scheme != "tcp":
            problems.error(where, f"{item}: a tcp+https route must use a tcp:// upstream")
        elif not from_tcp and upstream.scheme == "tcp":
            problems.error(where, f"{item}: a tcp:// upstream needs a tcp+https:// route")
        out.append(upstream)
    weights = [u.weight for u in out]
    if any(w is not None for w in weights) and any(w is None for w in weights):
        problems.error(
            path,
            "either no weights should be provided, or all endpoints must have non-zero "
            "weight specified",
        )
    return tuple(out)


def _parse_one(text: str, where: str, problems: Problems) -> Upstream | None:
    from urllib.parse import urlsplit

    url, weight = text, None
    if "," in text:
        url, _, raw_weight = text.partition(",")
        raw_weight = raw_weight.strip()
        if not raw_weight.isdigit():
            problems.error(where, f"{text}: invalid load balancing weight {raw_weight!r}")
            return None
        weight = int(raw_weight)
        if weight == 0:
            problems.error(where, f"{text}: zero load balancing weight not permitted")
            return None
        if weight > _MAX_WEIGHT:
            problems.error(where, f"{text}: load balancing weight exceeds {_MAX_WEIGHT}")
            return None
        url = url.strip()
    if "://" not in url:
        problems.error(where, f"{url}: url scheme must be provided")
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        problems.error(where, f"{url}: {exc}")
        return None
    if parts.scheme not in _UPSTREAM_SCHEMES:
        problems.error(
            where, f"{url}: unsupported scheme {parts.scheme!r}; use http, https or tcp"
        )
        return None
    if not parts.hostname:
        problems.error(where, f"{url}: endpoint hostname must be specified")
        return None
    if parts.username or parts.password:
        problems.error(where, f"{url}: credentials in an upstream URL are not supported")
        return None
    if parts.query or parts.fragment:
        problems.error(where, f"{url}: an upstream URL cannot carry a query or fragment")
        return None
    if parts.scheme == "tcp":
        if port is None:
            problems.error(where, f"{url}: a tcp:// upstream needs a port")
            return None
        if parts.path not in ("", "/"):
            problems.error(where, f"{url}: a tcp:// upstream cannot have a path")
            return None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return Upstream(url, parts.scheme, parts.hostname, port, parts.path, weight)


def _int(raw: Mapping[str, Any], key: str, default: int, low: int, path: str,
         problems: Problems) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_WEIGHT:
        problems.error(f"{path}.{key}", f"must be an integer >= {low}, got {value!r}")
        return default
    return value


def _duration(raw: Mapping[str, Any], key: str, default: float, path: str,
              problems: Problems) -> float:
    if key not in raw:
        return default
    try:
        return parse_duration(str(raw[key]))
    except ValueError as exc:
        problems.error(f"{path}.{key}", str(exc))
        return default


def _object(value: object, path: str, problems: Problems, allowed: tuple[str, ...]
            ) -> Mapping[str, Any] | None:
    if not isinstance(value, Mapping):
        problems.error(path, f"must be an object, got {value!r}")
        return None
    for key in value:
        if key not in allowed:
            problems.warn(f"{path}.{key}", f"unknown field (ignored); known: {', '.join(allowed)}")
    return value


def parse_least_request(value: object, path: str, problems: Problems) -> LeastRequestConfig:
    raw = _object(value, path, problems, ("choice_count",))
    if raw is None:
        return LeastRequestConfig()
    return LeastRequestConfig(_int(raw, "choice_count", 2, 2, path, problems))


def parse_ring_hash(value: object, path: str, problems: Problems) -> RingHashConfig:
    raw = _object(
        value, path, problems, ("minimum_ring_size", "maximum_ring_size", "hash_function")
    )
    if raw is None:
        return RingHashConfig()
    low = _int(raw, "minimum_ring_size", 1024, 1, path, problems)
    high = _int(raw, "maximum_ring_size", 8 * 1024 * 1024, 1, path, problems)
    if low > high:
        problems.error(f"{path}.minimum_ring_size", "must not exceed maximum_ring_size")
    func = str(raw.get("hash_function", "XX_HASH")).upper()
    if func not in ("XX_HASH", "MURMUR_HASH_2"):
        problems.error(f"{path}.hash_function", f"{func!r} is not XX_HASH or MURMUR_HASH_2")
    return RingHashConfig(low, high, func)


def parse_maglev(value: object, path: str, problems: Problems) -> MaglevConfig:
    raw = _object(value, path, problems, ("table_size",))
    if raw is None:
        return MaglevConfig()
    size = _int(raw, "table_size", 65537, 1, path, problems)
    if size < 2 or any(size % d == 0 for d in range(2, int(size**0.5) + 1)):
        problems.error(f"{path}.table_size", f"must be a prime number, got {size}")
    return MaglevConfig(size)


_HC_COMMON = ("timeout", "interval", "unhealthy_threshold", "healthy_threshold")
_HC_KINDS = ("http_health_check", "tcp_health_check", "grpc_health_check")


def parse_health_checks(value: object, path: str, problems: Problems
                        ) -> tuple[HealthCheck, ...]:
    if not isinstance(value, list):
        problems.error(path, f"must be a list of health check objects, got {value!r}")
        return ()
    out = []
    for index, item in enumerate(value):
        where = f"{path}[{index}]"
        raw = _object(item, where, problems, _HC_COMMON + _HC_KINDS)
        if raw is None:
            continue
        kinds = [k for k in _HC_KINDS if k in raw]
        if len(kinds) != 1:
            problems.error(
                where, "exactly one of http_health_check, tcp_health_check, "
                f"grpc_health_check is required (got {len(kinds)})",
            )
            continue
        check = _parse_check_kind(kinds[0], raw[kinds[0]], f"{where}.{kinds[0]}", problems)
        out.append(
            HealthCheck(
                timeout=_duration(raw, "timeout", 5.0, where, problems),
                interval=_duration(raw, "interval", 10.0, where, problems),
                unhealthy_threshold=_int(raw, "unhealthy_threshold", 2, 1, where, problems),
                healthy_threshold=_int(raw, "healthy_threshold", 1, 1, where, problems),
                **check,
            )
        )
    return tuple(out)


def _payload(value: object, where: str, problems: Problems) -> bytes:
    raw = _object(value, where, problems, ("text", "binary"))
    if raw is None:
        return b""
    try:
        if "text" in raw:  # Envoy: hex-encoded payload
            return bytes.fromhex(str(raw["text"]))
        return base64.b64decode(str(raw.get("binary", "")), validate=True)  # Envoy: base64
    except (ValueError, binascii.Error):
        problems.error(where, "`text` must be hex-encoded bytes, `binary` base64")
        return b""


def _parse_check_kind(kind: str, value: object, where: str, problems: Problems
                      ) -> dict[str, Any]:
    parsers: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
        "http_health_check": lambda raw: _http_check(raw, where, problems),
        "tcp_health_check": lambda raw: {
            "kind": "tcp",
            "send": _payload(raw["send"], f"{where}.send", problems) if "send" in raw else b"",
            "receive": tuple(
                _payload(r, f"{where}.receive[{i}]", problems)
                for i, r in enumerate(raw.get("receive", []) or [])
            ),
        },
        "grpc_health_check": lambda raw: {
            "kind": "grpc",
            "service_name": str(raw.get("service_name", "")),
            "authority": str(raw.get("authority", "")),
        },
    }
    allowed = {
        "http_health_check": ("path", "host", "expected_statuses"),
        "tcp_health_check": ("send", "receive"),
        "grpc_health_check": ("service_name", "authority"),
    }[kind]
    raw = _object(value if value is not None else {}, where, problems, allowed)
    return parsers[kind](raw if raw is not None else {})


def _http_check(raw: Mapping[str, Any], where: str, problems: Problems) -> dict[str, Any]:
    check_path = str(raw.get("path", "/"))
    if not check_path.startswith("/"):
        problems.error(f"{where}.path", f"must start with '/', got {check_path!r}")
    statuses: list[tuple[int, int]] = []
    for i, entry in enumerate(raw.get("expected_statuses", []) or []):
        item = _object(entry, f"{where}.expected_statuses[{i}]", problems, ("start", "end"))
        if item is None:
            continue
        start, end = item.get("start"), item.get("end")
        if not (isinstance(start, int) and isinstance(end, int) and 100 <= start < end <= 600):
            problems.error(
                f"{where}.expected_statuses[{i}]",
                "needs integer start < end within 100-600 (end is exclusive)",
            )
            continue
        statuses.append((start, end))
    return {
        "kind": "http",
        "path": check_path,
        "host": str(raw.get("host", "")),
        "expected_statuses": tuple(statuses) or ((200, 201),),
    }


def parse_outlier_detection(value: object, path: str, problems: Problems) -> OutlierDetection:
    raw = _object(
        value, path, problems,
        ("consecutive_5xx", "interval", "base_ejection_time", "max_ejection_percent",
         "enforcing_consecutive_5xx"),
    )
    if raw is None:
        return OutlierDetection()
    percent = _int(raw, "max_ejection_percent", 10, 0, path, problems)
    if percent > 100:
        problems.error(f"{path}.max_ejection_percent", f"must be 0-100, got {percent}")
    enforcing = _int(raw, "enforcing_consecutive_5xx", 100, 0, path, problems)
    if enforcing > 100:
        problems.error(f"{path}.enforcing_consecutive_5xx", f"must be 0-100, got {enforcing}")
    return OutlierDetection(
        enforcing_consecutive_5xx=enforcing,
        consecutive_5xx=_int(raw, "consecutive_5xx", 5, 1, path, problems),
        interval=_duration(raw, "interval", 10.0, path, problems),
        base_ejection_time=_duration(raw, "base_ejection_time", 30.0, path, problems),
        max_ejection_percent=percent,
    )


