"""The documented example configuration, conf/config.example.yaml, against the schema.

Every global setting and every route field must be documented there; the active part must
load; every commented ``# key: value`` line of a setting with a default must show that
default, written as an operator would (Go durations, true/false).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from twisted.trial.unittest import SynchronousTestCase

from gateway.config import ConfigErrors, load_snapshot
from gateway.config.coerce import coerce
from gateway.config.errors import Problems
from gateway.config.material import Reader
from gateway.config.route_parts import REDIRECT_FIELDS
from gateway.config.routes import ROUTE_FIELDS, parse_policy
from gateway.config.settings import SETTINGS, Kind, SettingInfo

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "conf" / "config.example.yaml"

SHARED = bytes(range(32))
COOKIE = bytes(range(32, 64))
ENV = {
    "SHARED_SECRET": base64.b64encode(SHARED).decode(),
    "COOKIE_SECRET": base64.b64encode(COOKIE).decode(),
    "IDP_CLIENT_SECRET": "secret",
}

# A global setting at the top level, active ("key: v") or commented out ("# key: v").
TOP_LEVEL = re.compile(r"^(?P<comment># )?(?P<key>[a-z0-9_]+):(?P<value>.*)$")
# Continuation lines of a commented multi-line value ("#   - item", "#   Name: value").
CONTINUATION = re.compile(r"^# {3}")
# Start of a commented example route inside `policy` ("  # - from: ...").
EXAMPLE_ROUTE = re.compile(r"^ {2}# - from:")
EXAMPLE_ROUTE_BODY = re.compile(r"^ {2}# {3}")


def read_example() -> list[str]:
    return EXAMPLE.read_text(encoding="utf-8").splitlines()


def mentions_key(lines: list[str], key: str) -> bool:
    """``key:`` at the start of a line, after optional indentation, ``#`` and ``- ``."""
    pattern = re.compile(rf"^\s*(?:#\s*)?(?:-\s+)?{re.escape(key)}:(?:\s|$)")
    return any(pattern.match(line) for line in lines)


def go_duration(seconds: float) -> str:
    """Whole seconds in Go's duration syntax: 50400 -> 14h, 300 -> 5m, 0 -> 0s."""
    if seconds == 0:
        return "0s"
    whole = int(seconds)
    assert whole == seconds, f"{seconds} is not whole seconds"
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return "".join(f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (secs, "s")) if n)


def has_default(info: SettingInfo) -> bool:
    """False for settings that are unset by default (empty, None, empty list or map)."""
    default = info.default
    if default is None or default == "":
        return False
    return not (isinstance(default, tuple | Mapping) and not default)


def is_scalar(value: object) -> bool:
    return isinstance(value, str | bool | int | float)


def render_scalar(info: SettingInfo) -> str:
    """How a scalar default is written in the file."""
    default = info.default
    if info.kind is Kind.DURATION:
        return go_duration(default)
    if isinstance(default, bool):
        return "true" if default else "false"
    return str(default)


def paragraphs(lines: list[str]) -> dict[int, str]:
    """Line index -> the text of its paragraph (lines between blank lines)."""
    out: dict[int, str] = {}
    start = 0
    for index in range(len(lines) + 1):
        if index == len(lines) or not lines[index].strip():
            text = "\n".join(lines[start:index])
            for member in range(start, index):
                out[member] = text
            start = index + 1
    return out


def top_level_entries(lines: list[str]) -> list[tuple[int, str, bool, Any]]:
    """(line index, key, commented, YAML value) for every top-level global setting line."""
    entries = []
    for index, line in enumerate(lines):
        match = TOP_LEVEL.match(line)
        if match is None or match["key"] not in SETTINGS:
            continue
        commented = match["comment"] is not None
        text = [line[2:] if commented else line]
        if commented and not match["value"].strip():
            follow = index + 1
            while follow < len(lines) and CONTINUATION.match(lines[follow]):
                text.append(lines[follow][2:])
                follow += 1
        loaded = yaml.safe_load("\n".join(text))
        entries.append((index, match["key"], commented, loaded[match["key"]]))
    return entries


def example_routes(lines: list[str]) -> list[tuple[int, str]]:
    """(line index, YAML text) of every commented example route inside `policy`."""
    out = []
    for index, line in enumerate(lines):
        if not EXAMPLE_ROUTE.match(line):
            continue
        body = [line[4:]]
        follow = index + 1
        while follow < len(lines) and EXAMPLE_ROUTE_BODY.match(lines[follow]):
            body.append(lines[follow][4:])
            follow += 1
        out.append((index + 1, "\n".join(body)))
    return out


def plain(value: Any) -> Any:
    """Mappings as dicts, so that typed values compare with plain ones."""
    return dict(value) if isinstance(value, Mapping) else value


class ExampleConfigTests(SynchronousTestCase):
    """conf/config.example.yaml documents the schema and loads."""

    def setUp(self) -> None:
        self.lines = read_example()

    def test_every_setting_appears(self) -> None:
        """Every key of SETTINGS appears as `key:` at the start of a line."""
        missing = [key for key in SETTINGS if not mentions_key(self.lines, key)]
        self.assertEqual(missing, [])

    def test_every_route_field_appears(self) -> None:
        """Every route field and redirect field appears as `key:` at the start of a line."""
        keys = [*ROUTE_FIELDS, *REDIRECT_FIELDS]
        missing = [key for key in keys if not mentions_key(self.lines, key)]
        self.assertEqual(missing, [])

    def test_loads_with_secrets_from_environment(self) -> None:
        """The active part loads with the secrets supplied by the environment."""
        snapshot = load_snapshot(str(EXAMPLE), ENV)
        options = snapshot.options
        self.assertEqual(snapshot.warnings, ())
        self.assertTrue(options.insecure_server)
        self.assertEqual(options.address, "127.0.0.1:8080")
        self.assertEqual(options.services, "all")
        self.assertEqual(options.idp_provider, "oidc")
        self.assertEqual(options.idp_provider_url, "http://127.0.0.1:9000")
        self.assertEqual(options.idp_client_id, "gateway")
        self.assertEqual(options.authenticate_service_url,
                         "http://authenticate.localhost.test:8080")
        self.assertEqual(options.log_level, "info")
        self.assertEqual(snapshot.material.shared_secret, SHARED)
        self.assertEqual(snapshot.material.cookie_secret, COOKIE)
        self.assertEqual(snapshot.material.idp_client_secret, "secret")
        self.assertEqual(snapshot.material.generated, ())
        self.assertEqual(len(snapshot.routes), 2)
        public, app = snapshot.routes
        self.assertTrue(public.allow_public_unauthenticated_access)
        self.assertEqual(app.allowed_domains, ("example.com",))
        self.assertFalse(app.allow_public_unauthenticated_access)

    def test_client_secret_must_be_supplied(self) -> None:
        """Without IDP_CLIENT_SECRET the example is refused, naming idp_client_secret."""
        env = {k: v for k, v in ENV.items() if k != "IDP_CLIENT_SECRET"}
        with self.assertRaises(ConfigErrors) as caught:
            load_snapshot(str(EXAMPLE), env)
        self.assertEqual([p.path for p in caught.exception.problems], ["idp_client_secret"])

    def test_unset_secrets_are_per_process_in_all_in_one_memory_mode(self) -> None:
        """Without SHARED_SECRET and COOKIE_SECRET the all-in-one example uses random keys."""
        snapshot = load_snapshot(str(EXAMPLE), {"IDP_CLIENT_SECRET": "secret"})
        self.assertEqual(snapshot.material.generated, ("shared_secret", "cookie_secret"))
        self.assertEqual(len(snapshot.material.shared_secret), 32)
        self.assertEqual(len(snapshot.material.cookie_secret), 32)

    def test_commented_lines_show_defaults(self) -> None:
        """Every commented `# key: value` line of a setting with a default shows it."""
        wrong = []
        checked = 0
        for index, key, commented, value in top_level_entries(self.lines):
            info = SETTINGS[key]
            if not commented or not has_default(info):
                continue
            checked += 1
            line = self.lines[index]
            if is_scalar(info.default):
                shown = line.split(":", 1)[1].strip().strip("\"'")
                if shown != render_scalar(info) or coerce(info, value) != info.default:
                    wrong.append(f"line {index + 1}: {line!r}, default {render_scalar(info)}")
            elif plain(coerce(info, value)) != plain(info.default):
                wrong.append(f"line {index + 1}: {key} shows {value!r}, "
                             f"default {info.default!r}")
        self.assertEqual(wrong, [])
        self.assertGreater(checked, 30)

    def test_commented_examples_are_valid_values(self) -> None:
        """Commented example values of unset settings have the setting's type."""
        wrong = []
        for index, key, commented, value in top_level_entries(self.lines):
            info = SETTINGS[key]
            if not commented or has_default(info):
                continue
            if isinstance(value, str) and value.startswith("<") and value.endswith(">"):
                continue  # a placeholder the operator fills in
            try:
                coerce(info, value)
            except ValueError as exc:
                wrong.append(f"line {index + 1}: {key}: {exc}")
        self.assertEqual(wrong, [])

    def test_every_setting_is_documented_once(self) -> None:
        """Each setting appears once at the top level, with type, default and env source."""
        paragraph = paragraphs(self.lines)
        seen: dict[str, list[int]] = {}
        for index, key, _commented, _value in top_level_entries(self.lines):
            seen.setdefault(key, []).append(index)
        problems = []
        for key, info in SETTINGS.items():
            where = seen.get(key, [])
            if len(where) != 1:
                problems.append(f"{key}: {len(where)} top-level lines")
                continue
            text = paragraph[where[0]]
            needed = ["Type:", "Default:"]
            needed.append("file only" if info.env is None else f"Env: {info.env}.")
            if info.extension:
                needed.append("Beyond the reference")
            if info.bootstrap:
                needed.append("Bootstrap-only")
            if not has_default(info):
                needed.append("Default: unset")
            elif is_scalar(info.default):
                rendered = render_scalar(info)
                if f"Default: {rendered}." not in text and f'Default: "{rendered}"' not in text:
                    needed.append(f"Default: {rendered}.")
            problems.extend(f"{key}: missing {word!r}" for word in needed if word not in text)
            if not info.extension and "Beyond the reference" in text:
                problems.append(f"{key}: marked beyond the reference but is in it")
        self.assertEqual(problems, [])

    def test_example_routes_are_valid(self) -> None:
        """Each commented example route parses without errors or warnings."""
        examples = example_routes(self.lines)
        self.assertGreaterEqual(len(examples), 8)
        for line, text in examples:
            problems = Problems()
            routes = parse_policy(yaml.safe_load(text), Reader(str(EXAMPLE.parent)), problems,
                                  30.0)
            self.assertEqual(
                ([str(p) for p in problems.errors], [str(p) for p in problems.warnings]),
                ([], []), f"example route at line {line}",
            )
            self.assertEqual(len(routes), 1)
