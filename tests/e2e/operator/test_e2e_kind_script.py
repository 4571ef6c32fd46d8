"""``make e2e-kind``'s preflight: it fails fast and clearly before touching anything, and when no Docker
engine answers it starts one (scripts/dockerd.sh, tested in test_dockerd_script.py) and says why when it
cannot; its manifests are well formed (the chart tests also dry-run them against the API server)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from cdcoperator.connectorcheck import validate_connector

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "e2e-kind.sh"


def _run(path_dirs: list[Path], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": os.pathsep.join([*map(str, path_dirs), "/usr/bin", "/bin"]),
           "SHARDCDC_CACHE": str(cache), "SHARDCDC_KIND": "kind", "KUBECTL": "kubectl", "SHARDCDC_HELM": "helm"}
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
        r = _run([bin_dir], tmp_path)
        assert r.returncode == 1
        assert r.stderr.strip() == ("e2e-kind: docker is not installed; kind runs Kubernetes nodes as Docker "
                                    "containers (Debian: apt-get install docker.io)")
    log = tmp_path / "calls"
    _fake(bin_dir, "docker", f'echo "$@" >> {log}; exit 0')  # an engine, but no kind
    r = _run([bin_dir], tmp_path)
    assert (r.returncode, r.stderr.strip()) == (
        1, "e2e-kind: kind not found; run 'make kind' (go install sigs.k8s.io/kind) or set SHARDCDC_KIND")
    assert not log.exists()  # nothing ran before the tools were all there


def test_starts_dockerd_when_no_engine_answers_and_says_why_it_could_not(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    for tool in ("kind", "kubectl", "helm"):
        _fake(bin_dir, tool, "exit 0")
    _fake(bin_dir, "docker", "exit 1")  # installed, but no engine answers
    _fake(bin_dir, "dockerd", "echo 'failed to start daemon: no space left' >&2; exit 1")
    r = _run([bin_dir], tmp_path)
    log = tmp_path / "logs" / "dockerd.log"
    assert r.returncode == 1
    if os.geteuid() != 0:
        assert r.stderr.strip().endswith("starting dockerd needs root; start Docker or set DOCKER_HOST")
        return
    assert r.stderr.strip().splitlines()[-1] == f"dockerd.sh: dockerd exited at start (log: {log})"
    assert "failed to start daemon: no space left" in log.read_text()
    assert not (tmp_path / "docker" / "dockerd.pid").exists()


def test_manifests_are_well_formed() -> None:
    files = sorted(p for p in (ROOT / "examples" / "kind").glob("*.yaml")
                   if p.name != "kind-cluster.yaml" and not p.name.endswith(".patch.yaml"))
    docs = {p.name: list(yaml.safe_load_all(p.read_text())) for p in files}
    assert list(docs) == ["00-namespace.yaml", "10-kafka.yaml", "20-vtgate-sim.yaml", "30-connector.yaml",
                          "40-workload-job.yaml", "50-reshard-job.yaml", "60-verify-job.yaml",
                          "70-spark-rbac.yaml"]
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
    # The spark phase's merge patch (only dicts, no deletions) makes a valid sparkSubmit connector.
    patch = yaml.safe_load((ROOT / "examples" / "kind" / "75-spark-backfill.patch.yaml").read_text())
    assert list(patch["spec"]) == ["snapshot"]
    patched = {**connector, "spec": {**connector["spec"],
                                     "snapshot": {**connector["spec"]["snapshot"], **patch["spec"]["snapshot"]}}}
    assert patched["spec"]["snapshot"]["backfill"]["engine"] == "sparkSubmit"
    assert validate_connector(patched) == []
    assert "examples/kind/75-spark-backfill.patch.yaml" in SCRIPT.read_text()
    script = SCRIPT.read_text()
    for name in docs:
        assert f"examples/kind/{name}" in script, name
    assert "e2e-kind:" in (ROOT / "Makefile").read_text()


def test_kind_cluster_config_fits_the_local_node_image() -> None:
    """The node image of scripts/kind-node-image.sh has no kindnetd (a bridge CNI config instead)."""
    config = yaml.safe_load((ROOT / "examples" / "kind" / "kind-cluster.yaml").read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    assert config["networking"] == {"apiServerAddress": "127.0.0.1", "disableDefaultCNI": True}
    assert [n["role"] for n in config["nodes"]] == ["control-plane"]  # bridge CNI: pods on one node only
    assert '--config "$ROOT/examples/kind/kind-cluster.yaml"' in SCRIPT.read_text()
