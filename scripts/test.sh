#!/usr/bin/env bash
# The whole test suite: installs what it needs (scripts/setup-dev.sh), then runs pytest.
# Extra arguments go to pytest (for example: scripts/test.sh -k reload).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
exec .venv/bin/pytest -q "$@"
