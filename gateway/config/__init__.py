"""Configuration: sources -> typed, validated, frozen snapshots (see ``snapshot``)."""

from gateway.config.errors import ConfigErrors, Problem
from gateway.config.routes import Route
from gateway.config.settings import SETTINGS, Options
from gateway.config.snapshot import Snapshot, load_snapshot

__all__ = ["SETTINGS", "ConfigErrors", "Options", "Problem", "Route", "Snapshot", "load_snapshot"]
