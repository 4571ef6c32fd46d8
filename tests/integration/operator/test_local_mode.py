"""Local mode through its commands: ``shardcdc run -f connector.yaml`` and ``shardcdc scale``.

The same planner and reconcile as the operator, worker processes instead of pods, a real Kafka
broker and the VTGate test server with a live workload: scale 1 -> 2 tasks, split 2 -> 4
shards, stop (every worker commits), start again (the saved status continues; the file's
``tasks: 1`` scales back down), and the topic must equal the source table with no duplicate
deliveries.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_mode_fixtures import Run, control, positions, ready, shardcdc
from polling import wait_for

from cdcoperator.local.control import ControlClient, ControlError
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import compare, materialise
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

STEP = 60.0


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("shop", ["-80", "80-"])
        yield s


def test_run_scale_reshard_stop_and_continue(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    prefix = f"lm{uuid.uuid4().hex[:6]}"
    state = tmp_path / "state"
    workload = Workload(sim, "shop", table="items", seed=5, large_every=120, large_rows=150)
    workload.ensure_table()
    workload.run(transactions=50)
    manifest = tmp_path / "connector.yaml"
    manifest.write_text(f"""\
apiVersion: shardcdc.io/v1alpha1
kind: CdcConnector
metadata:
  name: shop
spec:
  source:
    vitess:
      vtgate: "{sim.address}"
      keyspace: shop
  kafka:
    bootstrapServers: "{kafka_broker.bootstrap}"
    topicPrefix: {prefix}
    offsetsTopic: {prefix}-offsets
  tasks: 1
  config:
    offset.storage.replication.factor: "1"
    offset.flush.interval.ms: "200"
""")
    # Nothing runs yet: scale says so.
    r = shardcdc("scale", "shop", "--tasks", "2", "--state-dir", str(state))
    assert r.returncode == 1 and "no running `shardcdc run` for cdcconnector default/shop" in r.stderr

    run = Run(manifest, state, tmp_path / "run.log")
    writer = threading.Thread(target=workload.run, kwargs={"rate": 40.0}, daemon=True)
    try:
        client = wait_for(lambda: run.alive() or control(state, "shop"), STEP, "the control endpoint")
        wait_for(lambda: ready(client, 0, 1, 2), STEP, "generation 0 streaming")
        writer.start()
        pods = client.pods()
        assert [p["metadata"]["name"] for p in pods] == ["shop-g0-t0-0"]
        config = (state / "default/shop/pods/default/shop-g0-t0-0/volumes/config/worker.properties").read_text()
        # The generation's shared file; the task's identity came from the pod's environment (the
        # worker reports streaming both shards: Ready).
        assert "name=shop" in config.split("\n") and "shardcdc.task.shards" not in config

        # kubectl-scale-like, through the control endpoint; bad values are refused with the reason.
        r = shardcdc("scale", "shop", "--replicas", "0", "--state-dir", str(state))
        assert r.returncode == 1 and "spec.tasks: Invalid value: \"integer\": spec.tasks must be at least 1" in r.stderr
        r = shardcdc("scale", "shop", "--tasks", "2", "--state-dir", str(state))
        assert r.returncode == 0, r.stderr
        assert r.stdout == "cdcconnector.shardcdc.io/shop scaled (spec.tasks=2, metadata.generation=2)\n"
        a1 = wait_for(lambda: ready(client, 1, 2, 2), STEP, "generation 1 with 2 tasks")
        assert (a1["previousTasks"], [t["shards"] for t in a1["taskStates"]]) == (1, [["-80"], ["80-"]])

        sim.reshard("shop", 4)
        a2 = wait_for(lambda: ready(client, 2, 2, 4), STEP, "generation 2 over 4 shards")
        assert a2["previousTasks"] == 2
        assert [t["shards"] for t in a2["taskStates"]] == [["-40", "80-c0"], ["40-80", "c0-"]]

        workload.stop()
        writer.join(30)
        final = sim.positions("shop")
        wait_for(lambda: positions(client) == final, STEP, "every task at the source's final positions")
        assert run.stop() == 0
        assert "stopped: every worker has exited" in run.output()
        with pytest.raises(ControlError):
            ControlClient.find("shop", state_dir=state)
    finally:
        workload.stop()
        run.stop()
    reasons = [json.loads(line)["reason"] for line in (state / "default/shop/events.jsonl").read_text().splitlines()]
    assert reasons.count("GenerationStarted") == 3
    assert reasons.index("ReshardCompleted") > reasons.index("Resharding")
    assert "generation 2 started: 2 tasks over 4 shards (previous tasks 2; Reshard)" in run.output()

    # Start again: the file is the source of truth, as for kubectl apply after kubectl scale, so
    # spec.tasks is 1 again: generation 3 scales down to one task, from generation 2's offsets.
    more = Workload(sim, "shop", table="items", seed=6)
    more.next_id = workload.next_id
    more.ids = list(workload.ids)
    more.run(transactions=40)
    run = Run(manifest, state, tmp_path / "run2.log")
    try:
        client = wait_for(lambda: run.alive() or control(state, "shop"), STEP, "the control endpoint again")
        a3 = wait_for(lambda: ready(client, 3, 1, 4), STEP, "generation 3 with one task")
        assert (a3["previousTasks"], [t["shards"] for t in a3["taskStates"]]) == (2, [["-40", "40-80", "80-c0", "c0-"]])
        final = sim.positions("shop")
        wait_for(lambda: positions(client) == final, STEP, "caught up after the restart")
    finally:
        assert run.stop() == 0
    assert "generation 3 started: 1 tasks over 4 shards (previous tasks 2; Scale)" in run.output()

    records = consume_all(kafka_broker.bootstrap, f"{prefix}.shop.items")
    materialised = materialise(records)
    diff = compare(materialised, sim.source_truth("shop", "items"), "id", ["id", "name", "qty", "price"])
    assert diff.empty, diff.summary()
    assert materialised.duplicates == 0

