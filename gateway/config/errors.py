"""Configuration problems: each names the key path, what was wrong and what is valid.

Problems are collected, never raised one at a time, so an operator sees every mistake
in a file at once (buildbot's ConfigErrors, synapse's ConfigError with a path).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gateway.policy.problems import did_you_mean

__all__ = ["ConfigErrors", "Problem", "Problems", "did_you_mean"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a configuration, at ``path`` (``policy[2].from``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ConfigErrors(Exception):
    """A configuration that cannot be used; carries every problem found."""

    def __init__(
        self, problems: Iterable[Problem], source: str = "", warnings: Iterable[Problem] = ()
    ) -> None:
        self.problems = tuple(problems)
        self.warnings = tuple(warnings)
        self.source = source
        super().__init__(self.render())

    def render(self) -> str:
        where = f" in {self.source}" if self.source else ""
        head = f"invalid configuration{where} ({len(self.problems)} problem"
        head += "s)" if len(self.problems) != 1 else ")"
        return "\n".join([head + ":", *(f"  {p}" for p in self.problems)])


@dataclass(slots=True)
class Problems:
    """Accumulates errors and warnings while a configuration is read."""

    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    def error(self, path: str, message: str) -> None:
        self.errors.append(Problem(path, message))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(Problem(path, message))

    def raise_if_any(self, source: str = "") -> None:
        if self.errors:
            raise ConfigErrors(self.errors, source, self.warnings)
