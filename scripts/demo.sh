#!/usr/bin/env bash
# Installs the gateway and starts it in front of a demo app, both on loopback:
#   gateway  http://localhost:8080  (public route, see demo/gateway.yaml)
#   demo app http://127.0.0.1:8081  (shows the request the gateway forwarded)
# Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh

.venv/bin/python demo/app.py --port 8081 &
app=$!
PYTHONPATH="$PWD" .venv/bin/twistd --nodaemon --pidfile= gateway --config demo/gateway.yaml &
gw=$!
trap 'kill $app $gw 2>/dev/null || true; wait' EXIT INT TERM
echo "demo: open http://localhost:8080/ (Ctrl-C to stop)"
wait $gw
