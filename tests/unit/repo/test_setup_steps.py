"""Set-up steps (scripts/step.sh, the Makefile's set-up chains): one line per step with its time,
the whole output in a log under the cache, its tail shown on failure; `make demo` sets up only what
the demo uses while `make test` sets up everything."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
STEP = ROOT / "scripts" / "step.sh"


def _step(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(STEP), "fetch", str(tmp_path / "logs"), "bash", "-c", script],
                          capture_output=True, text=True, timeout=60)


def test_a_step_prints_one_line_and_keeps_its_output_in_the_log(tmp_path: Path) -> None:
    proc = _step(tmp_path, "for i in $(seq 1 400); do echo go: downloading module$i; done; echo warn >&2")
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert re.fullmatch(rf"set-up: fetch done in \d+s \(log: {tmp_path}/logs/fetch.log\)\n", proc.stdout)
    log = (tmp_path / "logs" / "fetch.log").read_text().splitlines()
    assert len(log) == 401 and log[0] == "go: downloading module1" and log[-1] == "warn"


def test_a_failed_step_shows_the_logs_tail_and_fails_with_its_code(tmp_path: Path) -> None:
    proc = _step(tmp_path, "for i in $(seq 1 100); do echo line$i; done; echo 'mvn: artifact not found' >&2; exit 7")
    assert proc.returncode == 7
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert re.fullmatch(rf"set-up: fetch FAILED after \d+s \(exit 7\); last lines of {tmp_path}/logs/fetch.log:", lines[0])
    assert lines[1:] == [f"line{i}" for i in range(62, 101)] + ["mvn: artifact not found"]


def _steps(target: str, tmp_path: Path) -> list[str]:
    """The set-up steps `make <target>` would run on a fresh machine (dry run, every target out of date)."""
    out = subprocess.run(["make", "-n", "-B", "--no-print-directory", target, f"CACHE={tmp_path}/cache"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    return re.findall(r"scripts/step\.sh ([a-z-]+) ", out)


def test_make_demo_sets_up_only_what_the_demo_uses_and_make_test_everything(tmp_path: Path) -> None:
    assert sorted(_steps("demo-setup", tmp_path)) == ["kafka", "native", "proto", "venv"]
    assert sorted(_steps("setup", tmp_path)) == ["debezium", "docker-tools", "fuzz-tools", "helm", "kafka", "kind",
                                                 "kube", "native", "prometheus", "proto", "rdkafka-header", "spark-crd",
                                                 "venv", "venv-dev", "vitess", "vitess-system"]
    demo = subprocess.run(["make", "-n", "--no-print-directory", "demo", f"CACHE={tmp_path}/cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert "demo-setup" in demo and "shardcdc_cli.cli demo" in demo
