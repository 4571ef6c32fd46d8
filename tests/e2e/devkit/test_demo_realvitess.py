"""``shardcdc demo`` against real Vitess v24: the session's vttestserver (``--vtgate``, which the
demo takes instead of starting its own with ``--real-vitess``) and the session's broker, short steps.
The demo starts, scales, has no reshard step (a vttestserver cannot reshard), waits for the topic to
catch up and verifies it equals the source table. Without ``make vitess``, ``--real-vitess`` says
in one line to run it."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cdcdemo import demo
from cdcoperator.local.children import start_bound
from localkafka import KafkaBroker
from realvitess import VTTestServer


@pytest.mark.realvitess
def test_demo_streams_real_vitess_scales_and_verifies(real_vitess: VTTestServer, kafka_broker: KafkaBroker) -> None:
    prefix = f"rvdemo{uuid.uuid4().hex[:6]}"
    proc = start_bound(
        [sys.executable, "-m", "shardcdc_cli.cli", "demo", "--vtgate", real_vitess.vtgate, "--table", "demo_items",
         "--bootstrap", kafka_broker.bootstrap, "--quick", "--plain", "--prefix", prefix, "--tasks", "1",
         "--scale-to", "2", "--step-timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"})
    try:
        out, _ = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-5000:]
    assert f"VTGate {real_vitess.vtgate} (real Vitess) {real_vitess.vtgate}, keyspace commerce (2 shards)" in out
    assert re.findall(r"\] ([1-3]/3 [a-z]+)", out) == ["1/3 start", "2/3 scale", "3/3 stop"], out[-5000:]
    assert re.findall(r"GenerationStarted +(generation \d started: .*)", out) == [
        "generation 0 started: 1 tasks over 2 shards",
        "generation 1 started: 2 tasks over 2 shards (previous tasks 1; Scale)"], out[-5000:]
    assert f"from {prefix}.commerce.demo_items" in out
    assert out.rstrip().endswith("verified: the topic equals the source table"), out[-3000:]


def test_without_make_vitess_one_line_says_to_run_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SHARDCDC_VITESS_HOME", str(tmp_path / "no-vitess"))
    parser = argparse.ArgumentParser()
    run = demo.register(parser)
    assert run(parser.parse_args(["--real-vitess", "--plain"])) == 1
    out = capsys.readouterr().out
    assert out.splitlines() == [f"demo failed: --real-vitess needs Vitess v24 over MariaDB: Vitess is not built in "
                                f"{tmp_path / 'no-vitess'}: run `make vitess` (or `make setup`) first"], out
