"""Run fuzz targets with atheris (libFuzzer), coverage-guided.

    .venv/bin/python tests/fuzz/run.py TARGET|all [--seconds N] [--keep DIR] [-- OPTION...]

``TARGET`` is a module name without ``fuzz_`` (``normalise``, ``http1_head`` ...).
``--seconds`` bounds each target's run (libFuzzer ``-max_total_time``). The repository's
corpus (``tests/fuzz/corpus/<target>``) seeds the run and is only read: inputs libFuzzer
finds interesting, and crash artifacts, go to a temporary directory (``--keep DIR`` puts
them there instead, to inspect or to merge into the corpus by hand). Exit status 1 when
a target crashed; each crash is printed with its input.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CORPUS = HERE / "corpus"
TARGETS = ("normalise", "proxyproto", "cookie", "redirects", "config", "http1_head", "h2_frames",
           "h2_engine", "hpack", "ssh_auth", "ssh_krl", "cross_origin", "ssh_preauth",
           "bearer_jwt", "mcp_request", "mcp_lists")
RSS_LIMIT_MB = 2048
INPUT_TIMEOUT = 10  # seconds one input may take before libFuzzer calls it a hang
MAX_LEN = 16384
SHOW = 2000  # bytes of a crashing input printed


@dataclass
class Result:
    target: str
    returncode: int
    output: str
    crashes: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.crashes

    def report(self) -> str:
        lines = [f"fuzz target {self.target}: exit status {self.returncode}"]
        for crash in self.crashes:
            data = crash.read_bytes()
            shown = repr(data[:SHOW]) + (f" ... ({len(data)} bytes)" if len(data) > SHOW else "")
            lines.append(f"  crashing input {crash.name}: {shown}")
        lines.append("  libFuzzer output (tail):")
        lines += ["    " + line for line in self.output.splitlines()[-60:]]
        return "\n".join(lines)


def run_target(target: str, seconds: int, work: Path, extra: list[str] | None = None
               ) -> Result:
    """Fuzz ``target`` for ``seconds`` in a subprocess; findings under ``work``."""
    new_inputs = work / target / "corpus"
    artifacts = work / target / "artifacts"
    new_inputs.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    seeds = CORPUS / target
    command = [
        sys.executable, "-m", f"tests.fuzz.fuzz_{target}",
        f"-max_total_time={seconds}", f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-timeout={INPUT_TIMEOUT}", f"-max_len={MAX_LEN}",
        f"-artifact_prefix={artifacts}{os.sep}", "-print_final_stats=1",
        *(extra or []),
        str(new_inputs),  # libFuzzer writes new inputs into the first directory only
        *([str(seeds)] if seeds.is_dir() else []),
    ]
    env = dict(os.environ, GATEWAY_FUZZ_INSTRUMENT="1", PYTHONHASHSEED="0")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    completed = subprocess.run(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", check=False,
                               timeout=seconds + 120)
    crashes = sorted(p for p in artifacts.iterdir() if p.is_file())
    return Result(target, completed.returncode, completed.stdout, crashes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", choices=[*TARGETS, "all"])
    parser.add_argument("--seconds", type=int, default=60, help="per target")
    parser.add_argument("--keep", type=Path, help="directory for new inputs and crashes")
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:  # what follows goes to libFuzzer
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    targets = TARGETS if args.target == "all" else (args.target,)
    with tempfile.TemporaryDirectory(prefix="gateway-fuzz-") as scratch:
        work = args.keep or Path(scratch)
        failed = False
        for target in targets:
            result = run_target(target, args.seconds, work, extra)
            print(result.report() if not result.ok else
                  f"fuzz target {target}: no crash in {args.seconds}s", flush=True)
            failed = failed or not result.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
