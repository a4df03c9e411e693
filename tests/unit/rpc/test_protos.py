"""The checked-in gRPC stubs are exactly what scripts/protos.sh generates from the .proto
files (a changed .proto without regenerated stubs fails here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROTOS = REPO / "gateway" / "rpc" / "protos"


def test_checked_in_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run(["bash", str(REPO / "scripts" / "protos.sh"), str(tmp_path)], check=True,
                   env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"}, timeout=120)
    fresh = tmp_path / "gateway" / "rpc" / "protos"
    generated = sorted(p.name for p in fresh.iterdir())
    assert generated, "protoc wrote nothing"
    checked_in = sorted(p.name for p in PROTOS.iterdir() if "_pb2" in p.name)
    assert checked_in == generated
    for name in generated:
        assert (PROTOS / name).read_bytes() == (fresh / name).read_bytes(), (
            f"gateway/rpc/protos/{name} is stale: run bash scripts/protos.sh")


def test_every_proto_has_its_stubs() -> None:
    for proto in PROTOS.glob("*.proto"):
        for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py"):
            assert (PROTOS / f"{proto.stem}{suffix}").exists()
