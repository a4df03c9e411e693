"""Turning one raw setting value (file-native or environment string) into its typed form."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.config.errors import Problems, did_you_mean
from gateway.config.providers import SETTING as PROVIDERS
from gateway.config.providers import parse_identity_providers
from gateway.config.settings import SETTINGS, CertificatePair, Kind, SettingInfo
from gateway.config.values import (
    decode_base64,
    parse_address,
    parse_bool,
    parse_duration,
    parse_list,
    parse_map,
    parse_workers,
    split_url,
)

_CLAIM_PREFIX = "X-Gateway-Claim-"
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")

# Settings whose enum messages the original product spelled out.
_ENUM_MESSAGES = {
    "services": "config: {value} is an invalid service type",
    "dns_lookup_family": (
        "config: unknown dns_lookup_family: {value}, known families are: V6_ONLY, V4_ONLY, AUTO"
    ),
    "databroker_storage_type": "config: unknown databroker storage backend type",
}

# Settings the reference names as no longer supported: a warning that says so.
_UNSUPPORTED = {
    "tracing_debug": "unsupported (ignored): tracing_sample_rate decides what is sampled",
}

_URL_LABELS = {
    "authenticate_service_url": "authenticate-url",
    "signout_redirect_url": "signout-redirect-url",
    "forward_auth_url": "forward-auth-url",
    "authorize_service_url": "authorize-url",
    "databroker_service_url": "databroker service url",
}

# where browsers are sent: only http(s)
_HTTP_ONLY = frozenset({"authenticate_service_url", "signout_redirect_url", "forward_auth_url"})


def claim_header_name(claim: str) -> str:
    """``email`` -> ``X-Gateway-Claim-Email`` (each dash-separated word capitalised)."""
    return _CLAIM_PREFIX + "-".join(w[:1].upper() + w[1:] for w in claim.split("-"))


def coerce_settings(raw: Mapping[str, Any], problems: Problems) -> dict[str, Any]:
    """Typed values for every known key present in ``raw``; unknown keys become warnings."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if key == "policy":
            continue
        info = SETTINGS.get(key)
        if key in _UNSUPPORTED:
            problems.warn(key, _UNSUPPORTED[key])
            continue
        if info is None:
            problems.warn(key, "unknown setting (ignored)"
                          + did_you_mean(key, [*SETTINGS, "policy"]))
            continue
        if info.kind is Kind.PROVIDERS:  # a list of entries: problems at their key paths
            continue
        try:
            out[key] = coerce(info, value)
        except ValueError as exc:
            message = str(exc)
            if not info.secret and str(value) not in message:
                message += f" (got {_show(value)})"
            problems.error(key, message)
    if raw.get(PROVIDERS) is not None:
        out[PROVIDERS] = parse_identity_providers(
            raw[PROVIDERS], problems,
            default_scopes=out.get("idp_scopes", SETTINGS["idp_scopes"].default))
    return out


def coerce(info: SettingInfo, value: Any) -> Any:
    kind = info.kind
    if value is None:
        return info.default
    if kind is Kind.BOOL:
        return parse_bool(value)
    if kind is Kind.DURATION:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if value == 0:
                return 0.0
            raise ValueError(
                f"duration {value!r} has no unit; write it with one, e.g. {value}s or {value}m"
            )
        return parse_duration(str(value))
    if kind is Kind.INT:
        number = int(value) if isinstance(value, str) and value.strip().isdigit() else value
        if isinstance(number, bool) or not isinstance(number, int) or not (
            0 <= number <= 2**32 - 1
        ):
            raise ValueError(f"must be an integer from 0 to 4294967295, got {value!r}")
        return number
    if kind is Kind.WORKERS:
        return parse_workers(value)
    if kind is Kind.FLOAT:
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ValueError(f"must be a decimal number, got {value!r}") from None
    if kind is Kind.ENUM:
        return _enum(info, value)
    if kind is Kind.LIST:
        return parse_list(value)
    if kind is Kind.URL_LIST:
        urls = parse_list(value)
        for url in urls:
            split_url(url)
        return urls
    if kind is Kind.MAP:
        return MappingProxyType(parse_map(value, "="))
    if kind is Kind.HEADERS:
        return MappingProxyType(_headers(value))
    if kind is Kind.CLAIM_HEADERS:
        return MappingProxyType(_claim_headers(value))
    if kind is Kind.CERTIFICATES:
        return _certificates(value)
    if kind is Kind.PROVIDERS:
        found = Problems()
        providers = parse_identity_providers(value, found)
        if found.errors:
            raise ValueError(str(found.errors[0]))
        return providers
    if isinstance(value, Mapping | list | tuple):
        raise ValueError(f"must be a {kind.value}, got a {type(value).__name__}")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if kind is Kind.ADDRESS:
        if text.strip().strip("\"'") == "":
            return ""
        parse_address(text)
        return text.strip().strip("\"'")
    if kind is Kind.URL and text:
        try:
            parts = split_url(text)
            if info.key in _HTTP_ONLY and parts.scheme not in ("http", "https"):
                raise ValueError(f"{text} url must use http or https")
        except ValueError as exc:
            label = _URL_LABELS.get(info.key)
            raise ValueError(f"config: bad {label} {text} : {exc}" if label else str(exc)) from None
    if kind is Kind.BASE64 and text:
        decode_base64(text)
    return text


def _enum(info: SettingInfo, value: Any) -> str:
    text = str(value).strip()
    if text == "" and info.default == "":
        return ""
    for choice in info.choices:
        if text.lower() == choice.lower() or (choice == "warn" and text.lower() == "warning"):
            return choice
    template = _ENUM_MESSAGES.get(info.key)
    head = template.format(value=text) if template else f"{text!r} is not valid"
    return _raise(f"{head}; valid values: {', '.join(info.choices)}")


def _raise(message: str) -> str:
    raise ValueError(message)


def _headers(value: Any) -> dict[str, str]:
    """``set_response_headers``: map, ``Name:value,...``, JSON or YAML; ``disable: true``."""
    try:
        headers = parse_map(value, ":")
    except ValueError:
        raise ValueError(
            f"config: failed to parse headers: failed to decode headers from '{value}'"
        ) from None
    if "disable" in headers:
        try:
            disabled = parse_bool(headers["disable"])
        except ValueError:
            raise ValueError("`disable` must be true or false") from None
        if disabled:
            return {}
        del headers["disable"]
    for name in headers:
        if not _HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid header name")
    return headers


def _claim_headers(value: Any) -> dict[str, str]:
    """A list of claims (``X-Gateway-Claim-<Name>``) or a map of header name to claim."""
    if isinstance(value, str) and ":" not in value and "=" not in value:
        value = parse_list(value)
    if isinstance(value, list | tuple):
        return {claim_header_name(claim): claim for claim in parse_list(list(value))}
    mapping = parse_map(value, "=")
    for name in mapping:
        if not _HEADER_NAME.match(name):
            raise ValueError(f"{name!r} is not a valid header name")
    return mapping


def _certificates(value: Any) -> tuple[CertificatePair, ...]:
    if not isinstance(value, list):
        raise ValueError("must be a list of {cert, key} objects with file locations")
    pairs = []
    for index, entry in enumerate(value):
        if not isinstance(entry, Mapping) or not entry.get("cert") or not entry.get("key"):
            raise ValueError(
                f"entry {index} must be an object with `cert` and `key` file locations"
            )
        pairs.append(CertificatePair(str(entry["cert"]), str(entry["key"])))
    return tuple(pairs)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


