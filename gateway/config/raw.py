"""Reading raw settings: the config file (by extension) and the environment.

The result is a plain mapping of key to raw value; file values keep their native types,
environment values are strings. Precedence is environment > file > defaults.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import javaproperties
import yaml

from gateway.config.errors import Problems
from gateway.config.settings import SETTINGS
from gateway.config.values import NESTED_TOO_DEEPLY, decode_base64, load_structured, yaml_load

FORMATS = {
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".toml": "toml",
    ".properties": "properties",
    ".props": "properties",
}


@dataclass
class RawConfig:
    """Merged raw settings, and the config file as read (for the checksum)."""

    values: dict[str, Any] = field(default_factory=dict)
    file_bytes: bytes = b""


def parse_file_bytes(data: bytes, path: str, problems: Problems) -> dict[str, Any]:
    """Parse config file content according to the extension of ``path``."""
    ext = os.path.splitext(path)[1].lower()
    fmt = FORMATS.get(ext)
    if fmt is None:
        problems.error(
            "", f"config: unsupported config file extension {ext or '(none)'!r} of {path}; "
            "use .yaml, .yml, .json, .toml or .properties",
        )
        return {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.error("", f"config: {path} is not UTF-8 text: {exc}")
        return {}
    loaded: Any
    try:
        if fmt == "yaml":
            loaded = yaml_load(text)
        elif fmt == "json":
            loaded = json.loads(text) if text.strip() else {}
        elif fmt == "toml":
            loaded = tomllib.loads(text)
        else:
            loaded = dict(javaproperties.loads(text))
    except (yaml.YAMLError, json.JSONDecodeError, tomllib.TOMLDecodeError, ValueError) as exc:
        problems.error("", f"config: cannot parse {path} as {fmt}: {_one_line(exc)}")
        return {}
    except RecursionError:  # "[[[[..." thousands deep
        problems.error("", f"config: cannot parse {path} as {fmt}: {NESTED_TOO_DEEPLY}")
        return {}
    if loaded is None:
        return {}
    if not isinstance(loaded, Mapping):
        problems.error("", f"config: {path} must hold a mapping of settings at the top level")
        return {}
    return {str(k): v for k, v in loaded.items()}


def read_environment(environ: Mapping[str, str], problems: Problems) -> dict[str, Any]:
    """Settings given by environment variables (empty variables count as unset)."""
    out: dict[str, Any] = {}
    for key, info in SETTINGS.items():
        if info.env is not None and environ.get(info.env, "") != "":
            out[key] = environ[info.env]
    policy = environ.get("POLICY", "")
    if policy:
        out["policy"] = decode_policy_env(policy, problems)
    return out


def decode_policy_env(text: str, problems: Problems) -> Any:
    """``POLICY``: base64 of a YAML or JSON list of routes (no ``policy:`` key)."""
    try:
        raw = decode_base64(text)
    except ValueError as exc:
        problems.error("POLICY", f"config: base64 decoding policy data: {exc}")
        return None
    try:
        routes = load_structured(raw.decode("utf-8"), "base64-encoded policy data")
    except (ValueError, UnicodeDecodeError) as exc:
        problems.error("POLICY", f"config: parsing base64-encoded policy data as yaml: {exc}")
        return None
    if not isinstance(routes, list):
        problems.error("POLICY", "config: base64 policy data must be a list of routes")
        return None
    return routes


def read_sources(
    path: str | None, environ: Mapping[str, str], problems: Problems,
    file_bytes: bytes | None = None,
) -> RawConfig:
    """Read the file (if any; ``file_bytes`` when already read) and the environment into
    one ``RawConfig``."""
    raw = RawConfig()
    if path:
        if file_bytes is not None:
            raw.file_bytes = file_bytes
        else:
            try:
                with open(path, "rb") as handle:
                    raw.file_bytes = handle.read()
            except OSError as exc:
                problems.error("", f"config: cannot read config file {path}: "
                               f"{exc.strerror or exc}")
                return raw
        raw.values.update(parse_file_bytes(raw.file_bytes, path, problems))
        if isinstance(raw.values.get("policy"), str):
            raw.values["policy"] = decode_policy_env(raw.values["policy"], problems)
    env_values = read_environment(environ, problems)
    raw.values.update(env_values)
    return raw


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
