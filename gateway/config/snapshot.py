"""One frozen configuration snapshot: options, compiled routes, material, provenance.

``load_snapshot`` is the single entry point: it reads the sources, types every value,
validates, compiles the policy and loads TLS material, and either returns a
``Snapshot`` or raises ``ConfigErrors`` listing every problem.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.config.coerce import coerce_settings
from gateway.config.errors import Problem, Problems
from gateway.config.material import Reader
from gateway.config.raw import read_sources
from gateway.config.routes import Route, parse_policy
from gateway.config.settings import SETTINGS, Options
from gateway.config.ssh import SshMaterial, load_ssh_material
from gateway.config.validate import Material, derive, validate
from gateway.config.values import dumps_canonical


@dataclass(frozen=True)
class Snapshot:
    """Everything the services need, fixed at load time."""

    options: Options
    routes: tuple[Route, ...]  # HTTP and TCP routes (the data plane's)
    material: Material
    warnings: tuple[Problem, ...]
    source: str
    files: frozenset[str]
    checksum: int
    loaded_at: float
    # the configuration file as read (a supervisor hands it to its workers, so each
    # builds the snapshot it validated, whatever the file holds by then)
    file_bytes: bytes = b""
    # ``from: ssh://NAME`` routes, served by the SSH server (``gateway.ssh``) only
    ssh_routes: tuple[Route, ...] = ()
    ssh_material: SshMaterial = field(default_factory=SshMaterial)  # its keys


def load_snapshot(
    path: str | None,
    environ: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
    file_bytes: bytes | None = None,
) -> Snapshot:
    """Build a snapshot from ``path`` and ``environ``; raise ``ConfigErrors`` if invalid.

    ``file_bytes``: the file's content as already read (``path`` then only names it)."""
    env = os.environ if environ is None else environ
    problems = Problems()
    raw = read_sources(path, env, problems, file_bytes)
    base_dir = os.path.dirname(os.path.abspath(path)) if path else os.getcwd()
    reader = Reader(base_dir)
    if path:
        reader.files.add(os.path.abspath(path))
        reader.contents[os.path.abspath(path)] = raw.file_bytes
    typed = coerce_settings(raw.values, problems)
    options = derive(Options(**typed))
    routes = parse_policy(raw.values.get("policy"), reader, problems,
                          options.default_upstream_timeout)
    material = validate(options, routes, reader, problems)
    ssh_material = load_ssh_material(
        options.ssh_address, options.ssh_host_keys, options.ssh_host_key_files,
        options.ssh_user_ca_key, options.ssh_user_ca_key_file, reader, problems,
        sum(1 for r in routes if r.ssh is not None))
    problems.raise_if_any(path or "environment")
    return Snapshot(
        options=options,
        routes=tuple(r for r in routes if r.ssh is None),
        ssh_routes=tuple(r for r in routes if r.ssh is not None),
        ssh_material=ssh_material,
        material=material,
        warnings=tuple(problems.warnings),
        source=path or "environment",
        files=frozenset(reader.files),
        checksum=_checksum(raw.values, reader.files, reader.contents),
        loaded_at=time.time() if now is None else now,
        file_bytes=raw.file_bytes,
    )


def keep_bootstrap(previous: Snapshot, new: Snapshot) -> tuple[Snapshot, list[str]]:
    """Carry bootstrap-only settings over from ``previous``; name those that changed."""
    changed = {}
    for key, info in SETTINGS.items():
        if info.bootstrap and getattr(previous.options, key) != getattr(new.options, key):
            changed[key] = getattr(previous.options, key)
    if not changed:
        return new, []
    options = dataclasses.replace(new.options, **changed)
    return dataclasses.replace(new, options=options), sorted(changed)


def _checksum(values: Mapping[str, object], files: set[str],
              contents: Mapping[str, bytes]) -> int:
    """A signed 64-bit digest of the effective settings and every referenced file, as
    this load read them (not read again)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(dumps_canonical(values).encode())
    for name in sorted(files):
        digest.update(name.encode())
        digest.update(contents.get(name, b"\0missing"))
    return int.from_bytes(digest.digest(), "big", signed=True)
