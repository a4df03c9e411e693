"""The descriptions of the generated reference pages: every setting, route field and
policy criterion has one (in the schema, or in docs/reference/descriptions.yaml where
the schema has none), and the hand-written table holds no stale entry."""

from __future__ import annotations

import re
import sys

from gateway.config.route_parts import REDIRECT_FIELDS
from gateway.config.routes import ROUTE_FIELDS
from gateway.config.settings import SETTINGS
from gateway.policy.criteria import CRITERIA
from tests.docs.pages import DOCS

sys.path.insert(0, str(DOCS / "_ext"))
import gateway_reference as generator


def schema_texts() -> dict[str, dict[str, str]]:
    return {
        "settings": {k: v.doc for k, v in SETTINGS.items()},
        "route_fields": {**ROUTE_FIELDS, **{f"redirect.{k}": v
                                            for k, v in REDIRECT_FIELDS.items()}},
        "criteria": dict.fromkeys(CRITERIA, ""),
    }


def problems(table: dict[str, dict[str, object]]) -> list[str]:
    found = []
    for section, texts in schema_texts().items():
        entries = table[section]
        for name, text in texts.items():
            if not text.strip() and not entries.get(name):
                found.append(f"{section}.{name}: no description (add it to "
                             "docs/reference/descriptions.yaml)")
        for name in entries:
            if name not in texts:
                found.append(f"{section}.{name}: stale, the code has no such name")
            elif texts[name].strip():
                found.append(f"{section}.{name}: stale, the schema has its text now")
    for name in CRITERIA:
        entry = table["criteria"].get(name)
        if isinstance(entry, dict) and not (entry.get("example") and entry.get("matches")):
            found.append(f"criteria.{name}: needs an example and what it matches")
    return found


def test_descriptions_are_complete_and_current() -> None:
    assert problems(generator.descriptions()) == []


def test_a_missing_or_stale_entry_is_reported() -> None:
    table = generator.descriptions()
    table["criteria"].pop("source_ip")
    table["criteria"]["device"] = {"example": "device: {is: x}", "matches": "a device"}
    table["settings"]["address"] = "Where it listens."
    assert problems(table) == [
        "settings.address: stale, the schema has its text now",
        "criteria.source_ip: no description (add it to docs/reference/descriptions.yaml)",
        "criteria.device: stale, the code has no such name",
    ]


def labels(markdown: str, prefix: str) -> list[str]:
    return re.findall(rf"^\({re.escape(prefix)}([a-z0-9_-]+)\)=$", markdown, re.M)


def test_generated_markdown_has_one_section_per_name() -> None:
    assert labels(generator.settings_markdown(), "setting-") == list(SETTINGS)
    assert labels(generator.route_fields_markdown(), "field-") == [
        *ROUTE_FIELDS, *(f"redirect-{k}" for k in REDIRECT_FIELDS)]
    assert labels(generator.criteria_markdown(), "criterion-") == list(CRITERIA)
    assert labels(generator.settings_markdown(labels=False), "setting-") == []


def test_every_setting_is_in_a_group_of_the_schema() -> None:
    groups = generator.setting_groups()
    assert list(groups) == list(SETTINGS)
    assert groups["address"] == "shared settings"
    assert groups["ssh_address"] == "native SSH"
    assert groups["otel_traces_exporter"] == "OpenTelemetry"


def test_defaults_are_written_as_in_a_file() -> None:
    assert generator.render_default(SETTINGS["cookie_expire"]) == "`14h`"
    assert generator.render_default(SETTINGS["cookie_secure"]) == "`true`"
    assert generator.render_default(SETTINGS["certificates"]) == "unset"
    assert generator.go_duration(0.5) == "500ms"


def test_schema_text_is_shown_as_written() -> None:
    assert generator.plain_text("each optionally ',<weight>', *not* [a link] `a<b*`") == (
        "each optionally ',\\<weight>', \\*not\\* \\[a link\\] `a<b*`")
