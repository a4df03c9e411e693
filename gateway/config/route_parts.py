"""Parsers for the parts of a route object: redirects, header rewrites, claims and TLS
material. Each records problems under the route's path."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gateway.config.errors import Problems
from gateway.config.material import Pem, Reader, key_matches_certificate, load_material
from gateway.config.values import parse_bool

REDIRECT_FIELDS: dict[str, str] = {
    "https_redirect": "Swap the scheme to https.",
    "scheme_redirect": "New scheme.",
    "host_redirect": "New host.",
    "port_redirect": "New port.",
    "path_redirect": "New path.",
    "prefix_rewrite": "Replace the matched prefix.",
    "response_code": "Status code (301, 302, 303, 307, 308; default 301).",
    "strip_query": "Drop the query string.",
}
_REDIRECT_CODES = (301, 302, 303, 307, 308)


@dataclass(frozen=True, slots=True)
class Redirect:
    https_redirect: bool = False
    scheme_redirect: str = ""
    host_redirect: str = ""
    port_redirect: int | None = None
    path_redirect: str = ""
    prefix_rewrite: str | None = None
    response_code: int = 301
    strip_query: bool = False


@dataclass(frozen=True, slots=True)
class HeaderRewrite:
    header: str
    prefix: str
    value: str


def parse_claims(value: object, path: str, problems: Problems) -> Mapping[str, tuple[str, ...]]:
    if not isinstance(value, Mapping):
        problems.error(path, f"must be a map of claim name to list of values, got {value!r}")
        return MappingProxyType({})
    out: dict[str, tuple[str, ...]] = {}
    for key, val in value.items():
        if not isinstance(key, str):
            problems.error(path, "cannot convert nested map: all keys must be strings")
            continue
        items = val if isinstance(val, list) else [val]
        if any(isinstance(v, Mapping | list) for v in items):
            problems.error(f"{path}.{key}", "values must be scalars or a list of scalars")
            continue
        out[key] = tuple(str(v).lower() if isinstance(v, bool) else str(v) for v in items)
    return MappingProxyType(out)


def parse_header_rewrites(value: object, path: str, problems: Problems
                           ) -> tuple[HeaderRewrite, ...]:
    if not isinstance(value, list):
        problems.error(path, "must be a list of {header, prefix, value} objects")
        return ()
    out = []
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping) or not entry.get("header"):
            problems.error(f"{path}[{i}]", "needs at least a `header` and a `value`")
            continue
        out.append(HeaderRewrite(str(entry["header"]), str(entry.get("prefix") or ""),
                                 str(entry.get("value") or "")))
    return tuple(out)


def parse_redirect(value: object, path: str, problems: Problems) -> Redirect | None:
    if not isinstance(value, Mapping):
        problems.error(path, f"must be an object, got {value!r}")
        return None
    for key in value:
        if key not in REDIRECT_FIELDS:
            problems.warn(f"{path}.{key}", "unknown redirect field (ignored)")
    kwargs: dict[str, Any] = {}
    try:
        for key in ("https_redirect", "strip_query"):
            if key in value:
                kwargs[key] = parse_bool(value[key])
    except ValueError as exc:
        problems.error(path, str(exc))
    for key in ("scheme_redirect", "host_redirect", "path_redirect"):
        if value.get(key) is not None:
            kwargs[key] = str(value[key])
    if value.get("prefix_rewrite") is not None:
        kwargs["prefix_rewrite"] = str(value["prefix_rewrite"])
    if kwargs.get("path_redirect") and "prefix_rewrite" in kwargs:
        problems.error(path, "path_redirect and prefix_rewrite are mutually exclusive")
    if kwargs.get("path_redirect") and not kwargs["path_redirect"].startswith("/"):
        problems.error(f"{path}.path_redirect", "must start with '/'")
    if kwargs.get("https_redirect") and kwargs.get("scheme_redirect"):
        problems.error(path, "https_redirect and scheme_redirect are mutually exclusive")
    if value.get("port_redirect") is not None:
        port = value["port_redirect"]
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            problems.error(f"{path}.port_redirect", f"must be a port 1-65535, got {port!r}")
        else:
            kwargs["port_redirect"] = port
    if value.get("response_code") is not None:
        code = value["response_code"]
        if code not in _REDIRECT_CODES or isinstance(code, bool):
            problems.error(
                f"{path}.response_code",
                f"must be one of {', '.join(map(str, _REDIRECT_CODES))}, got {code!r}",
            )
        else:
            kwargs["response_code"] = code
    return Redirect(**kwargs)


def parse_route_tls(item: Mapping[str, Any], base: str, reader: Reader, problems: Problems,
                     values: dict[str, Any]) -> None:
    def text(key: str) -> str:
        val = item.get(key)
        return "" if val is None else str(val)

    values["tls_custom_ca"] = load_material(
        reader, problems, inline_key=f"{base}.tls_custom_ca", inline=text("tls_custom_ca"),
        file_key=f"{base}.tls_custom_ca_file", file=text("tls_custom_ca_file"), kind=Pem.CERTS,
    )
    values["tls_downstream_client_ca"] = load_material(
        reader, problems, inline_key=f"{base}.tls_downstream_client_ca",
        inline=text("tls_downstream_client_ca"), file_key=f"{base}.tls_downstream_client_ca_file",
        file=text("tls_downstream_client_ca_file"), kind=Pem.CERTS,
    )
    cert_given = bool(text("tls_client_cert") or text("tls_client_cert_file"))
    key_given = bool(text("tls_client_key") or text("tls_client_key_file"))
    if cert_given != key_given:
        problems.error(base, "config: client certificate key and cert both must be non-empty")
        return
    values["tls_client_cert"] = load_material(
        reader, problems, inline_key=f"{base}.tls_client_cert", inline=text("tls_client_cert"),
        file_key=f"{base}.tls_client_cert_file", file=text("tls_client_cert_file"),
        kind=Pem.CERTS,
    )
    values["tls_client_key"] = load_material(
        reader, problems, inline_key=f"{base}.tls_client_key", inline=text("tls_client_key"),
        file_key=f"{base}.tls_client_key_file", file=text("tls_client_key_file"), kind=Pem.KEY,
    )
    cert, key = values["tls_client_cert"], values["tls_client_key"]
    if cert and key and not key_matches_certificate(cert, key):
        problems.error(base, "tls_client_key does not match tls_client_cert")
