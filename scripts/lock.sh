#!/usr/bin/env bash
# Regenerates requirements/gateway.lock: every package the Debian package's virtualenv
# installs (setup.cfg's install_requires plus the build requirements in
# requirements/build.in), pinned with their sha256 hashes, resolved for Debian 12's
# Python 3.11. Run it after changing install_requires; commit the lock file it writes.
#   bash scripts/lock.sh             # keep existing pins where they still satisfy setup.cfg
#   bash scripts/lock.sh --upgrade   # move every pin to the newest allowed version
# Extra arguments go to pip-compile (for example --upgrade-package twisted).
set -euo pipefail
cd "$(dirname "$0")/.."

PIP_TOOLS_VERSION=7.6.2
tool=.cache/lock-venv
if [ ! -x "$tool/bin/pip-compile" ]; then
    # Debian's python3, the interpreter the package's virtualenv uses.
    /usr/bin/python3 -m venv "$tool"
    "$tool/bin/pip" install -q "pip-tools==$PIP_TOOLS_VERSION"
fi
# Only the public index: a machine's local wheel directories must not change the lock.
export PIP_CONFIG_FILE=/dev/null
unset PIP_FIND_LINKS PIP_EXTRA_INDEX_URL PIP_INDEX_URL
export CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh"
exec "$tool/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --no-emit-index-url --output-file requirements/gateway.lock \
    "$@" setup.cfg requirements/build.in
