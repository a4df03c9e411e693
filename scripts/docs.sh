#!/usr/bin/env bash
# Builds the documentation site (docs/, Sphinx + MyST) as the tests do, strictly: warnings
# are errors, every cross-reference and heading anchor must resolve (no network). Then
# builds the man pages and refreshes the prebuilt copies the Debian package installs
# (debian/man/; tests/docs/test_build.py fails while they are stale). Every page is read
# afresh (-E): the generated ones change with the code, which Sphinx does not watch.
#   bash scripts/docs.sh        # -> .cache/docs/html/index.html, debian/man/*
# Needs the docs extra: .venv/bin/pip install -e '.[docs]' (scripts/setup-dev.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
sphinx=.venv/bin/sphinx-build
out=.cache/docs
"$sphinx" -q -W --keep-going -n -E -b html -d "$out/doctrees" docs "$out/html"
"$sphinx" -q -W --keep-going -n -b man -d "$out/doctrees" docs "$out/man"
mkdir -p debian/man
cp "$out"/man/gateway.1 "$out"/man/gateway-daemon.8 "$out"/man/gateway.yaml.5 debian/man/
echo "docs: $out/html/index.html; man pages in debian/man/" >&2
