#!/usr/bin/env bash
# Builds the Debian package (dpkg-buildpackage -us -uc -b, dh-virtualenv) from this
# checkout and prints the path of gateway_<version>_amd64.deb as its last line.
#
#   bash scripts/build-deb.sh                      # -> .cache/deb/<key>/gateway_0.1.0_amd64.deb
#   bash scripts/build-deb.sh --version 0.1.0+1    # the same tree with a changelog entry on top
#
# The build runs in a copy of the files that go into the package (git's tracked and
# untracked-but-not-ignored files), so the checkout stays clean; dpkg-buildpackage's
# output lands beside that copy. The .deb is cached under .cache/deb/, keyed by a hash
# of those files (and --version): a second run with nothing changed does not rebuild.
# Needs: dpkg-dev debhelper dh-virtualenv python3.11-venv (scripts/setup-dev.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

version=""
if [ "${1:-}" = "--version" ]; then
    version=${2:?--version needs a Debian version}
    shift 2
fi
[ $# -eq 0 ] || { echo "usage: $0 [--version VERSION]" >&2; exit 2; }

# What goes into the package; tests, benchmarks and the demo do not.
inputs=(debian gateway twisted conf requirements setup.cfg pyproject.toml README.md
        scripts/build-deb.sh)
list_inputs() {
    git ls-files -z --cached --others --exclude-standard -- "${inputs[@]}" |
        while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done
}
key=$( { printf 'version=%s\n' "$version"; list_inputs | sort -z |
         xargs -0 sha256sum; } | sha256sum | cut -c1-16)

cache=.cache/deb
out=$cache/$key
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9      # one build at a time; a second caller then finds the first one's .deb
deb=$(compgen -G "$out/gateway_*_amd64.deb" | head -n1 || true)
if [ -n "$deb" ]; then
    echo "build-deb: cached ($key)" >&2
    echo "$deb"
    exit 0
fi

work=$(mktemp -d "$PWD/$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/gateway"
list_inputs | tar -c --null -T - | tar -x -C "$work/gateway"
if [ -n "$version" ]; then
    entry=$work/changelog
    {
        printf 'gateway (%s) unstable; urgency=medium\n\n' "$version"
        printf '  * Rebuild as %s.\n\n' "$version"
        printf ' -- gateway developers <gateway@example.org>  %s\n\n' "$(date -R)"
        cat "$work/gateway/debian/changelog"
    } > "$entry"
    mv "$entry" "$work/gateway/debian/changelog"
fi
# pip's downloads are kept beside the .debs: a rebuild after a change fetches nothing.
export PIP_CACHE_DIR=$PWD/.cache/pip
started=$(date +%s)
(cd "$work/gateway" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    echo "build-deb: dpkg-buildpackage failed (log above)" >&2
    exit 1
}
mkdir -p "$out"
mv "$work"/*.deb "$work"/*.buildinfo "$work"/*.changes "$work/build.log" "$out/"
echo "build-deb: built in $(( $(date +%s) - started ))s ($key)" >&2
# Keep the four newest builds (the upgrade test needs two versions of one tree).
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name 'build.*' -printf '%T@ %p\n' |
    sort -rn | tail -n +5 | cut -d' ' -f2- | xargs -r rm -rf
compgen -G "$out/gateway_*_amd64.deb" | head -n1
