#!/usr/bin/env bash
# Builds the gateway's container image without any registry, and prints its name as its
# last line (localhost/gateway:<version>, also tagged :<key> and :latest).
#
#   bash scripts/build-image.sh             # build, or reuse the cached build of these inputs
#   bash scripts/build-image.sh --rebuild   # build again (newer Debian packages: security fixes)
#
# No base image is pulled (none can be, here or at an air-gapped site): the root file
# system is made from Debian's packages by mmdebstrap (variant "extract": the packages'
# files, no maintainer scripts, no shell, no apt), and the gateway is the virtualenv of the
# .deb that scripts/build-deb.sh builds (/opt/gateway: the locked packages, less the
# build tools and the libraries' test suites).
# buildah commits it as one layer in Docker's image format (OCI's has no HEALTHCHECK).
#
# The image runs as uid 65532 (gateway), with /var/lib/gateway its one writable place
# (a volume: autocert's account and certificates) and a read-only root file system
# working (podman run --read-only). Its cache: .cache/image/<key>/gateway-<version>.tar
# (`podman load -i` it elsewhere), keyed by a hash of the .deb, this script, deploy/image/
# and the package set; with the image still in podman's storage a rerun returns at once.
# Needs root, mmdebstrap, buildah and podman (scripts/setup-dev.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=localhost/gateway
SUITE=bookworm
UID_GID=65532
# The .deb's Depends (python3.11 and the libraries the wheels link; not systemd: no init
# in a container) and ca-certificates: the trust store for the identity provider, OTLP
# and upstream TLS (made into a bundle below).
EXTRA_PACKAGES=ca-certificates
MIRROR=${GATEWAY_IMAGE_MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${GATEWAY_IMAGE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# Files no process in the image reads: documentation (but each package's copyright),
# manuals, translations. dpkg skips them while unpacking.
DPKG_EXCLUDES=(
    --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*'
    --dpkgopt='path-exclude=/usr/share/lintian/*'
    --dpkgopt='path-exclude=/usr/lib/python3.11/idlelib/*'
    --dpkgopt='path-exclude=/usr/lib/python3.11/lib2to3/*'
    --dpkgopt='path-exclude=/usr/lib/python3.11/pydoc_data/*'
    --dpkgopt='path-exclude=/usr/lib/python3.11/test/*'
    # glibc's iconv modules (8 MB): Python has its own codecs.
    --dpkgopt='path-exclude=/usr/lib/x86_64-linux-gnu/gconv/*'
)

# mmdebstrap's extract hook (it runs this script again with the root directory; the
# "extract" variant runs no customize hooks): the gateway's files, its user, the
# writable volume and the CA bundle.
if [ "${1:-}" = "--customize" ]; then
    root=${2:?} deb=${3:?}
    # The packages that were unpacked, as dpkg's status, so that image scanners
    # (trivy, syft, grype) see what is inside: "extract" leaves the status empty.
    for pkg in "$root"/var/cache/apt/archives/*.deb; do
        dpkg-deb --field "$pkg"
        printf 'Status: install ok installed\n\n'
    done > "$root/var/lib/dpkg/status"
    unpacked=$(mktemp -d)
    dpkg-deb -x "$deb" "$unpacked"
    mkdir -p "$root/opt"
    cp -a "$unpacked/opt/gateway" "$root/opt/"
    mkdir -p "$root/usr/share/doc/gateway"
    cp "$unpacked/usr/share/doc/gateway/copyright" "$root/usr/share/doc/gateway/"
    rm -rf "$unpacked"
    # What the virtualenv has for building, not running: pip, setuptools and wheel (the
    # .deb installs the project with --no-build-isolation), and the libraries' own test
    # suites (27 MB). Nothing at run time imports them.
    site=$root/opt/gateway/lib/python3.11/site-packages
    rm -rf "$site"/pip "$site"/pip-*.dist-info "$site"/setuptools "$site"/setuptools-*.dist-info \
        "$site"/pkg_resources "$site"/_distutils_hack "$site"/distutils-precedence.pth \
        "$site"/wheel "$site"/wheel-*.dist-info "$root"/opt/gateway/bin/pip* "$root"/opt/gateway/bin/wheel
    find "$site" -depth -type d \( -name test -o -name tests \) -exec rm -rf {} +
    ln -sf /opt/gateway/bin/gateway "$root/usr/bin/gateway"
    install -m 0644 deploy/image/healthcheck.py "$root/opt/gateway/healthcheck.py"
    # No shell: a login is nobody's business in this image.
    printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ngateway:x:%s:%s:gateway:/var/lib/gateway:/usr/sbin/nologin\n' \
        "$UID_GID" "$UID_GID" > "$root/etc/passwd"
    printf 'root:x:0:\ngateway:x:%s:\n' "$UID_GID" > "$root/etc/group"
    install -d -m 0755 "$root/etc/gateway"
    install -m 0644 deploy/image/config.yaml "$root/etc/gateway/config.yaml"
    install -d -m 0700 -o "$UID_GID" -g "$UID_GID" "$root/var/lib/gateway"
    install -d -m 1777 "$root/tmp"
    # update-ca-certificates' bundle, without running it (no maintainer scripts here).
    mkdir -p "$root/etc/ssl/certs"
    cat "$root"/usr/share/ca-certificates/mozilla/*.crt > "$root/etc/ssl/certs/ca-certificates.crt"
    # The standard library's bytecode, as python3.11's postinst would have compiled it:
    # with a read-only root nothing is ever cached, and every start would compile again.
    chroot "$root" /usr/bin/python3.11 -m compileall -q -j0 \
        --invalidation-mode unchecked-hash /usr/lib/python3.11 >/dev/null
    rm -rf "$root"/var/log/* "$root"/var/cache/debconf/* "$root/usr/share/lintian"
    exit 0
fi

rebuild=no
if [ "${1:-}" = "--rebuild" ]; then rebuild=yes; shift; fi
[ $# -eq 0 ] || { echo "usage: $0 [--rebuild]" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ]; then
    echo "build-image: needs root (mmdebstrap's root mode, podman's system storage)" >&2
    exit 1
fi
for tool in mmdebstrap buildah podman; do
    command -v "$tool" >/dev/null || {
        echo "build-image: $tool is missing: apt-get install mmdebstrap buildah podman runc" >&2
        exit 1
    }
done

deb=$(bash scripts/build-deb.sh | tail -n1)
version=$(dpkg-deb --field "$deb" Version)
packages=$(dpkg-deb --field "$deb" Depends | tr ',' '\n' | grep -v systemd |
           sed 's/(.*)//; s/ //g' | grep . | sort | paste -sd, -),$EXTRA_PACKAGES
key=$( { sha256sum "$deb" scripts/build-image.sh deploy/image/*
         printf '%s\n' "$SUITE" "$packages" "$MIRROR" "$SECURITY_MIRROR" "${DPKG_EXCLUDES[@]}"
       } | sha256sum | cut -c1-16)
cache=.cache/image
out=$cache/$key
archive=$out/gateway-$version.tar
mkdir -p "$cache"
exec 9>"$cache/lock"
flock 9
tag_all() {  # $1: the image as found (built, kept in storage, or loaded)
    podman tag "$1" "$NAME:$key" "$NAME:$version" "$NAME:latest"
}
if [ "$rebuild" = no ] && podman image exists "$NAME:$key"; then
    tag_all "$NAME:$key"
    echo "build-image: cached ($key)" >&2
    echo "$NAME:$version"
    exit 0
fi
if [ "$rebuild" = no ] && [ -f "$archive" ]; then
    podman load --quiet --input "$archive" >/dev/null
    tag_all "$NAME:$version"  # (the name the archive holds)
    echo "build-image: loaded $archive" >&2
    echo "$NAME:$version"
    exit 0
fi

started=$(date +%s)
work=$(mktemp -d "$PWD/$cache/build.XXXXXX")
container=""
trap 'rm -rf "$work"; [ -z "$container" ] || buildah rm "$container" >/dev/null 2>&1 || true' EXIT
# The package's changelog date: every file's mtime and the image's creation time, so two
# builds of the same inputs from the same mirror state give the same layer.
SOURCE_DATE_EPOCH=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./usr/share/doc/gateway/changelog.gz |
    gzip -dc | sed -n 's/^ -- .*>  //p' | head -n1 | xargs -I{} date -d {} +%s)
export SOURCE_DATE_EPOCH
mmdebstrap --quiet --variant=extract --mode=root --include="$packages" "${DPKG_EXCLUDES[@]}" \
    --extract-hook="bash '$PWD/scripts/build-image.sh' --customize \"\$1\" '$PWD/$deb'" \
    "$SUITE" "$work/rootfs.tar" \
    "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" \
    "deb $SECURITY_MIRROR $SUITE-security main" >"$work/mmdebstrap.log" 2>&1 || {
    tail -n 40 "$work/mmdebstrap.log" >&2
    echo "build-image: mmdebstrap failed (log above)" >&2
    exit 1
}

container=$(buildah from --quiet --format docker scratch)
buildah add --quiet "$container" "$work/rootfs.tar" / >/dev/null
# Environment: HOME and XDG_DATA_HOME put autocert's default directory at
# /var/lib/gateway (a setting in a mounted file still wins: this is not AUTOCERT_DIR);
# SSL_CERT_FILE names the bundle for the OpenSSL inside the cryptography wheel.
buildah config \
    --user "$UID_GID:$UID_GID" \
    --workingdir /var/lib/gateway \
    --env PATH=/opt/gateway/bin:/usr/bin:/bin \
    --env HOME=/var/lib/gateway \
    --env XDG_DATA_HOME=/var/lib \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --env PYTHONDONTWRITEBYTECODE=1 \
    --env GATEWAY_HEALTHCHECK_URL=http://127.0.0.1:8080/ping \
    --entrypoint '["/opt/gateway/bin/twistd", "--nodaemon", "--pidfile=", "gateway"]' \
    --cmd '["--config", "/etc/gateway/config.yaml"]' \
    --port 8080 --port 8443 \
    --volume /var/lib/gateway \
    --stop-signal SIGTERM \
    --healthcheck 'CMD /opt/gateway/bin/python -I -S /opt/gateway/healthcheck.py' \
    --healthcheck-interval 30s --healthcheck-timeout 5s \
    --healthcheck-start-period 10s --healthcheck-retries 3 \
    --label org.opencontainers.image.title=gateway \
    --label "org.opencontainers.image.version=$version" \
    --label org.opencontainers.image.description="identity-aware access proxy" \
    --author "gateway developers <gateway@example.org>" \
    --created-by "scripts/build-image.sh" \
    "$container"
buildah commit --quiet --format docker --timestamp "$SOURCE_DATE_EPOCH" --rm \
    "$container" "$NAME:$key" >/dev/null
container=""
tag_all "$NAME:$key"
mkdir -p "$out"
podman save --quiet --format docker-archive --output "$work/image.tar" "$NAME:$version"
mv "$work/image.tar" "$archive"
size=$(podman image inspect --format '{{.Size}}' "$NAME:$key")
echo "build-image: built in $(( $(date +%s) - started ))s ($key), $(( size / 1000000 )) MB" >&2
# Keep the two newest builds.
find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name 'build.*' -printf '%T@ %p\n' |
    sort -rn | tail -n +3 | cut -d' ' -f2- | xargs -r rm -rf
echo "$NAME:$version"
