"""Build the benchmarks' small Go programs once per source change (standard library only)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent


def go_binary(name: str) -> str:
    """The binary of ``bench/<name>``, built into the project cache if missing or older than its sources."""
    src = HERE / name
    cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc"))
    out = cache / "bin" / name
    sources = [*src.glob("*.go"), src / "go.mod"]
    if not out.exists() or out.stat().st_mtime < max(p.stat().st_mtime for p in sources):
        out.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "GOCACHE": str(cache / "go" / "build"), "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
        subprocess.run(["go", "build", "-o", str(out), "."], cwd=src, env=env, check=True)
    return str(out)
