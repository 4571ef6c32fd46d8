"""``make e2e-kind`` cannot run here (no Docker engine); what can be checked is: it fails fast and
clearly before touching anything, and its manifests are well formed (the chart tests also dry-run
them against the API server)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from cdcworker.admin.validate import validate_connector

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "e2e-kind.sh"


def _run(path_dirs: list[Path]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"])}
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, timeout=60, check=False)


def _fake(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)


def test_fails_fast_without_docker_or_kind(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if not Path("/usr/bin/docker").exists():
        r = _run([bin_dir])
        assert r.returncode == 1
        assert r.stderr.strip() == "e2e-kind: docker is not installed; kind runs Kubernetes nodes as Docker containers"
    _fake(bin_dir, "docker", "exit 1")  # installed, but no engine
    r = _run([bin_dir])
    assert (r.returncode, r.stderr.strip()) == (
        1, "e2e-kind: no Docker engine reachable (docker info failed); start Docker or set DOCKER_HOST")
    log = tmp_path / "calls"
    _fake(bin_dir, "docker", f'echo "$@" >> {log}; exit 0')  # an engine, but no kind
    r = _run([bin_dir])
    assert r.returncode == 1 and r.stderr.startswith("e2e-kind: kind is not installed")
    assert log.read_text().split("\n")[0] == "info"  # nothing but the preflight ran


def test_manifests_are_well_formed() -> None:
    docs = {p.name: list(yaml.safe_load_all(p.read_text())) for p in sorted((ROOT / "tests" / "e2e").glob("*.yaml"))}
    assert list(docs) == ["00-namespace.yaml", "10-kafka.yaml", "20-vtgate-sim.yaml", "30-connector.yaml",
                          "40-workload-job.yaml", "50-reshard-job.yaml", "60-verify-job.yaml"]
    for name, objs in docs.items():
        for obj in objs:
            assert obj["apiVersion"] and obj["kind"], name
            if obj["kind"] != "Namespace":
                assert obj["metadata"]["namespace"] == "shardcdc-e2e", name
            pod = (obj.get("spec") or {}).get("template", {}).get("spec")
            if pod:
                assert pod["securityContext"]["runAsNonRoot"] is True, name
    (connector,) = docs["30-connector.yaml"]
    assert validate_connector(connector) == []
    script = SCRIPT.read_text()
    for name in docs:
        assert f"tests/e2e/{name}" in script, name
    assert "e2e-kind:" in (ROOT / "Makefile").read_text()
