#!/usr/bin/env bash
# Regenerates the gRPC stubs checked in beside gateway/rpc/protos/*.proto (message classes,
# type stubs and service stubs), with the grpcio-tools that setup.cfg's test extra pins.
# Run it after changing a .proto file and commit what it writes; tests/unit/test_protos.py
# fails when the checked-in stubs differ from a fresh generation.
#   bash scripts/protos.sh            # write into gateway/rpc/protos
#   bash scripts/protos.sh OUT_DIR    # write the tree under OUT_DIR instead (the test's use)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.}
python=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
# Paths relative to the repository root, so the stubs import each other as
# gateway.rpc.protos.* rather than as top-level modules.
"$python" -m grpc_tools.protoc -I . \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    gateway/rpc/protos/*.proto
