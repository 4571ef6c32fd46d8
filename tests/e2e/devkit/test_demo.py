"""``shardcdc demo --quick``: every step of ``make demo`` end to end, with plain (non-interactive) output."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
import uuid
from collections import deque
from typing import Any

import pytest
from polling import wait_for

from cdcdemo.demo import Observer, render, table_text
from cdcoperator.local.children import start_bound


def test_quick_demo_scales_reshards_and_verifies() -> None:
    """As `make demo` runs it, with --prometheus: the demo starts its own broker (no --bootstrap), its
    start-up and shut-down print no librdkafka lines, and its Prometheus scrapes the workers while they stream."""
    prefix = f"demo{uuid.uuid4().hex[:6]}"
    proc = start_bound(
        [sys.executable, "-m", "shardcdc_cli.cli", "demo", "--quick", "--plain", "--prefix", prefix, "--step-timeout", "90",
         "--prometheus"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "200"})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    try:
        url = wait_for(lambda: next((m.group(1) for line in lines if (m := re.match(r"Prometheus: (http\S+) ", line))), None),
                       120, "the Prometheus URL")
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(30)
    out = "".join(lines)
    with pytest.raises(OSError):  # stopped with the demo
        urllib.request.urlopen(f"{url}/-/ready", timeout=5)
    assert proc.returncode == 0, out[-5000:]
    # the demo asks its Prometheus, before the workers stop, for what it scraped from them
    scraped = re.findall(r"Prometheus: ([\d,]+) records sent, scraped from the running workers", out)
    assert len(scraped) == 1 and int(scraped[0].replace(",", "")) > 0, out[-5000:]
    steps = re.findall(r"\] ([1-4]/4 [a-z]+)", out)
    assert steps == ["1/4 start", "2/4 scale", "3/4 reshard", "4/4 stop"], out[-5000:]
    started = re.findall(r"GenerationStarted +(generation \d started: .*)", out)
    assert started == ["generation 0 started: 2 tasks over 4 shards",
                       "generation 1 started: 4 tasks over 4 shards (previous tasks 2; Scale)",
                       "generation 2 started: 4 tasks over 8 shards (previous tasks 4; Reshard)"], out[-5000:]
    assert re.search(r"generation 2 \(Running\): 4 tasks, previous 4, Ready=True", out)
    assert f"from {prefix}.commerce.items" in out
    assert "0 duplicate deliveries" in out
    assert out.rstrip().endswith("verified: the topic equals the source table")
    assert re.match(r"\[ *[\d.]+s\] starting a Kafka broker\n", out), out[:2000]  # its own broker, first
    noise = [line for line in out.splitlines() if "rdkafka" in line or "Connect to" in line]
    assert noise == [], "\n".join(noise[:5])


class FakeObserver(Observer):
    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(client=None)
        self.body = body
        self.rates = {"demo-g1-t0-0": 123.4}


def test_live_view_renders_tasks_shards_positions_lag_and_rates() -> None:
    from rich.console import Console

    from vtgatesim.workload import WorkloadStats

    body = {"status": {
        "conditions": [{"type": "Ready", "status": "True"}], "lag": "1s",
        "assignment": {"generation": 1, "tasks": 2, "previousTasks": 1, "phase": "Running", "shards": ["-80", "80-"],
                       "taskStates": [
                           {"id": 0, "shards": ["-80"], "phase": "Streaming", "pod": "demo-g1-t0-0", "lag": "1s",
                            "position": "-80@MySQL56/aaaa:1-42"},
                           {"id": 1, "shards": ["80-"], "phase": "Pending"}]}}}
    obs = FakeObserver(body)

    class W:
        stats = WorkloadStats(transactions=7, rows=9)

    console = Console(record=True, width=140)
    console.print(render(obs, "2/4 scale", deque(["Normal  GenerationStarted generation 1 started"]), W()))
    text = console.export_text()
    assert "Ready=True  generation 1  tasks 2 (previous 1)  shards 2  phase Running" in text
    assert re.search(r"│ 0 +│ demo-g1-t0-0 │ Streaming │ -80 @ …1-42 +│ 1s +│ 123 +│", text), text
    assert re.search(r"│ 1 +│ - +│ Pending +│ 80- @ - +│ - +│ 0 +│", text), text
    assert "workload: 7 transactions, 9 rows    step: 2/4 scale" in text
    assert "GenerationStarted generation 1 started" in text
    assert table_text(obs).splitlines() == [
        "generation 1 (Running): 2 tasks, previous 1, Ready=True, lag 1s",
        "  task 0 demo-g1-t0-0   Streaming  lag 1s       123 ev/s  -80@…1-42",
        "  task 1 -              Pending    lag -          0 ev/s  80-@-"]
