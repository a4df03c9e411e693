#!/usr/bin/env bash
# Installs everything the gateway's tests and demo need, on a fresh Debian machine or an
# already prepared one (each step is skipped when it is already done):
#   Debian packages (python3-venv, redis-server, curl, nginx, caddy, haproxy, wrk, h2load,
#   iproute2, pebble, chromium, slapd + ldap-utils, prometheus (promtool),
#   openssh-server + openssh-client and postgresql (peers of the `gateway tcp` tests),
#   asciinema (plays the recordings of native SSH sessions in their tests), man-db (renders
#   the man pages the docs build makes),
#   tomcat10 and jetty9 (upstreams of the path-parameter tests; their services stay off),
#   dpkg-dev, debhelper, dh-virtualenv, lintian, python3-seccomp (the Debian package tests);
#   podman, runc, buildah, mmdebstrap, podman-compose and CNI's dnsname plugin (the
#   container image tests; and the one podman setting these machines need);
#   Node.js only if missing),
#   a virtualenv in .venv with the project (editable), its test tools and the docs build,
#   the npm packages of the test identity provider (tests/peers/oidc), the test browser's
#   driver (tests/peers/browser) and the MCP TypeScript SDK (tests/peers/mcp).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server redis-tools)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
[ -x /usr/sbin/nginx ] || command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
command -v caddy >/dev/null 2>&1 || need_apt+=(caddy)
command -v h2load >/dev/null 2>&1 || need_apt+=(nghttp2-client)
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)
[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null 2>&1 || need_apt+=(haproxy)
command -v ss >/dev/null 2>&1 || need_apt+=(iproute2)
command -v pebble >/dev/null 2>&1 || need_apt+=(pebble)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
[ -x /usr/sbin/slapd ] || need_apt+=(slapd)
command -v ldapsearch >/dev/null 2>&1 || need_apt+=(ldap-utils)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
[ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v asciinema >/dev/null 2>&1 || need_apt+=(asciinema)  # plays native SSH recordings
command -v man >/dev/null 2>&1 || need_apt+=(man-db)  # renders the man pages (tests/docs)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_apt+=(postgresql)
[ -f /usr/share/tomcat10/bin/bootstrap.jar ] || need_apt+=(tomcat10)  # path-parameter tests
[ -f /usr/share/jetty9/start.jar ] || need_apt+=(jetty9)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs npm)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-dev: please install: ${need_apt[*]} (apt-get install -y ...)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${need_apt[@]}"
    # the tests run their own Tomcat and Jetty; the packages' services (port 8080) stay off
    for unit in tomcat10 jetty9; do
        if [[ " ${need_apt[*]} " == *" $unit "* ]]; then
            systemctl disable --now "$unit" >/dev/null 2>&1 || true
        fi
    done
fi

# An unprivileged login for the test sshd: OpenSSH honours a session's `signal` request
# only for a login other than root (tests/integration/test_ssh_signals.py).
if [ "$(id -u)" -eq 0 ] && ! id gateway-ssh-test >/dev/null 2>&1; then
    # (password "*": no password login, but not locked like "!", which sshd refuses)
    useradd --system --create-home --home-dir /var/lib/gateway-ssh-test --shell /bin/sh \
        --password '*' gateway-ssh-test
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=.venv/.gateway-installed
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test,docs]'
    touch "$stamp"
fi

for dir in tests/peers/oidc tests/peers/browser tests/peers/mcp; do
    if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    fi
done

# Building, linting and checking the Debian package (tests/packaging, scripts/build-deb.sh).
need_deb=()
command -v dpkg-buildpackage >/dev/null 2>&1 || need_deb+=(dpkg-dev)
command -v dh >/dev/null 2>&1 || need_deb+=(debhelper)
command -v dh_virtualenv >/dev/null 2>&1 || need_deb+=(dh-virtualenv)
command -v lintian >/dev/null 2>&1 || need_deb+=(lintian)
command -v systemd-analyze >/dev/null 2>&1 || need_deb+=(systemd)
dpkg -s python3.11-venv >/dev/null 2>&1 || need_deb+=(python3.11-venv)
# The test confines the service's process as its unit says (SystemCallFilter=: seccomp).
/usr/bin/python3 -c 'import seccomp' >/dev/null 2>&1 || need_deb+=(python3-seccomp)
if [ ${#need_deb[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-dev: please install: ${need_deb[*]} (apt-get install -y ...)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${need_deb[@]}"
fi

# Building and running the container image (scripts/build-image.sh, tests/packaging/
# test_image.py): rootful podman with runc (crun, podman's default, fails on these
# machines: "cgroups in hybrid mode not supported"; the tests pass --runtime runc
# --cgroup-manager=cgroupfs), buildah to commit, mmdebstrap for the root file system,
# podman-compose for deploy/compose.yaml, dnsname so that its services find each other
# by name on CNI networks.
need_oci=()
command -v podman >/dev/null 2>&1 || need_oci+=(podman)
command -v runc >/dev/null 2>&1 || need_oci+=(runc)
command -v buildah >/dev/null 2>&1 || need_oci+=(buildah)
command -v mmdebstrap >/dev/null 2>&1 || need_oci+=(mmdebstrap)
command -v podman-compose >/dev/null 2>&1 || need_oci+=(podman-compose)
[ -x /usr/lib/cni/dnsname ] || need_oci+=(golang-github-containernetworking-plugin-dnsname)
if [ ${#need_oci[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-dev: please install: ${need_oci[*]} (apt-get install -y ...)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${need_oci[@]}"
fi
# Without it every `podman run` fails here: "setrlimit RLIMIT_NOFILE/NPROC: operation not
# permitted". This machine's setting (test and CI machines only), never the image's; a
# containers.conf someone already wrote is left alone.
conf=/etc/containers/containers.conf
if [ "$(id -u)" -eq 0 ] && [ ! -e "$conf" ]; then
    mkdir -p /etc/containers
    printf '[containers]\ndefault_ulimits = []\n' > "$conf"
elif [ -e "$conf" ] && ! grep -q '^default_ulimits' "$conf"; then
    echo "setup-dev: note: $conf has no 'default_ulimits = []' under [containers]; podman run may fail with setrlimit errors" >&2
fi
