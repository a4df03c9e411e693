#!/usr/bin/env bash
# Installs everything, then runs on loopback:
#   the gateway       http://localhost:8080        (sign in; see what the app receives)
#                     http://admins.localhost:8080 (only the "admins" group)
#                     http://public.localhost:8080 (no sign-in)
#   a local identity provider (node-oidc-provider) on http://127.0.0.1:9000:
#                     any login and password work; try alice@example.test (admins)
#   the demo app      http://127.0.0.1:8081
# Ctrl-C stops all three.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; wait' EXIT INT TERM
.venv/bin/python demo/app.py --port 8081 &
pids+=($!)
(cd tests/peers/oidc && PORT=9000 REDIRECT_URIS=http://authenticate.localhost:8080/oauth2/callback \
    POST_LOGOUT_REDIRECT_URIS=http://public.localhost:8080/ exec node server.js) &
pids+=($!)
PYTHONPATH="$PWD" .venv/bin/twistd --nodaemon --pidfile= gateway --config demo/gateway.yaml &
pids+=($!)
echo "demo: open http://localhost:8080/ and sign in (any password; try alice@example.test)"
wait "${pids[2]}"
