"""End to end: CdcConnector -> operator (kopf, real kube-apiserver) -> worker processes -> Kafka.

The operator runs in-process with ``KopfRunner`` under its least-privilege ServiceAccount. There
is no kubelet: ``ApiKubelet`` (tests/operator_kubelet.py) runs the pod template of every Deployment
the operator creates as a real ``shardcdc worker`` process (command, env, the mounted ConfigMap)
and reports it back as a Pod, so the operator observes real workers through its pod index and
their ``/status`` documents. During a live workload the keyspace is split 2 -> 4 shards (the
workers stop at the journal with exit status 10 and the operator follows), then ``kubectl scale``
takes the connector from 2 to 4 tasks; the verifier proves the topic equals the source table.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from operator_e2e_fixtures import Cluster, operator_cluster, worker_logs
from operator_kube_fixtures import wait_for
from polling import eventually

from cdcworker.offsets.keys import parse_offset_record_key
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import compare, materialise
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

NS = "e2e"
STEP_TIMEOUT = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from operator_cluster(tmp_path_factory, NS)


def test_cr_to_operator_to_worker_processes_to_kafka(cluster: Cluster, kafka_broker: KafkaBroker) -> None:
    prefix = f"e2e{uuid.uuid4().hex[:6]}"
    with VTGateSim() as sim:
        sim.create_keyspace("orders", ["-80", "80-"])
        workload = Workload(sim, "orders", table="items", seed=11, large_every=150, large_rows=200)
        workload.ensure_table()
        workload.run(transactions=60)  # history for the initial snapshot
        body = {
            "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
            "metadata": {"name": "orders", "namespace": NS},
            "spec": {
                "source": {"vitess": {"vtgate": sim.address, "keyspace": "orders", "vtctld": sim.address}},
                "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topicPrefix": prefix,
                          "offsetsTopic": f"{prefix}-offsets"},
                "tasks": 2,
                "config": {"offset.storage.replication.factor": "1", "offset.flush.interval.ms": "200"},
                "deletionPolicy": "DeleteOffsets",
            },
        }
        writer = threading.Thread(target=workload.run, kwargs={"rate": 40.0}, daemon=True)
        writer.start()
        workdir = cluster.kubelet.kubelet.workdir
        try:
            cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
            a0 = wait_for(lambda: cluster.ready("orders", 0, 2, 2), STEP_TIMEOUT, "generation 0 streaming")
            assert [t["shards"] for t in a0["taskStates"]] == [["-80"], ["80-"]]
            # Real pods in the API server, backed by real worker processes.
            pods = {p["metadata"]["name"]: p for p in cluster.pods()}
            assert sorted(pods) == ["orders-g0-t0-0", "orders-g0-t1-0"]
            wait_for(lambda: all(p["status"]["containerStatuses"][0]["ready"] for p in cluster.pods()),
                     STEP_TIMEOUT, "the worker pods ready (their /readyz)")

            # A 2 -> 4 split while the workload runs: workers stop at the journal (exit 10), the
            # operator drains and starts generation 1 over the four new shards.
            sim.reshard("orders", 4)
            a1 = wait_for(lambda: cluster.ready("orders", 1, 2, 4), STEP_TIMEOUT, "generation 1 over 4 shards")
            assert a1["previousTasks"] == 2
            assert [t["shards"] for t in a1["taskStates"]] == [["-40", "80-c0"], ["40-80", "c0-"]]
            assert sorted(j["shard"] for j in a1["journalPositions"]) == ["-40", "40-80", "80-c0", "c0-"]

            cluster.kubectl("scale", "cdc/orders", "--replicas=4")
            a2 = wait_for(lambda: cluster.ready("orders", 2, 4, 4), STEP_TIMEOUT, "generation 2 with 4 tasks")
            assert a2["previousTasks"] == 2
            assert [t["shards"] for t in a2["taskStates"]] == [["-40"], ["40-80"], ["80-c0"], ["c0-"]]

            workload.stop()
            writer.join(30)
            final = sim.positions("orders")
            wait_for(lambda: cluster.positions("orders") == final, STEP_TIMEOUT, "every task at the final positions")
            # stopped: every worker exits (SIGTERM, offsets committed) and the operator records it.
            cluster.kubectl("patch", "cdc/orders", "--type=merge", "-p", '{"spec": {"state": "stopped"}}')
            wait_for(lambda: (cluster.status("orders").get("assignment") or {}).get("stoppedCleanly"),
                     STEP_TIMEOUT, "stoppedCleanly")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nevents: {cluster.events('orders')}\n{worker_logs(workdir)}") from None
        finally:
            workload.stop()
            writer.join(30)

        records = consume_all(kafka_broker.bootstrap, f"{prefix}.orders.items")
        state = materialise(records)
        diff = compare(state, sim.source_truth("orders", "items"), "id", ["id", "name", "qty", "price"])
        assert diff.empty, diff.summary()
        # Every generation change stopped its workers gracefully at their durable positions (or at
        # the reshard journal), so nothing was delivered twice.
        assert state.duplicates == 0

    # Never two generations at once, and each ran.
    seen = [g for c, g in cluster.kubelet.live_generations if c == "orders"]
    assert {frozenset({0}), frozenset({1}), frozenset({2})} <= set(seen)
    assert all(len(g) == 1 for g in seen), sorted(set(seen), key=sorted)

    def generation_events() -> None:  # kopf posts them from a background task: they may trail the status
        events = cluster.events("orders")
        reasons = [r for _, r, _ in events]
        # The reshard's steps as events: detected or followed, then completed.
        assert "Resharding" in reasons and "ReshardCompleted" in reasons[reasons.index("Resharding"):], reasons
        assert [m for _, r, m in events if r == "ReshardCompleted"] == [
            "generation 1 streams 4 shards: -40, 40-80, 80-c0, c0-"]
        assert [m for _, r, m in events if r == "GenerationStarted"] == [
            "generation 0 started: 2 tasks over 2 shards",
            "generation 1 started: 2 tasks over 4 shards (previous tasks 2; Reshard)",
            "generation 2 started: 4 tasks over 4 shards (previous tasks 2; Scale)"]

    eventually(generation_events, STEP_TIMEOUT, "the generations' events")

    # Deletion with DeleteOffsets: children removed, then every offset record of the connector tombstoned.
    cluster.kubectl("delete", "cdc/orders", "--wait=false")
    wait_for(lambda: cluster.get("orders") is None, STEP_TIMEOUT, "the connector deleted")
    offsets = consume_all(kafka_broker.bootstrap, f"{prefix}-offsets")
    latest: dict[bytes, bytes | None] = {}
    for rec in offsets:
        assert rec.key is not None
        latest[rec.key] = rec.value
    mine = {k: v for k, v in latest.items() if parse_offset_record_key(k)[0] == "orders"}
    assert len(mine) >= 4 and all(v is None for v in mine.values()), mine
    # Posted by kopf's background task, possibly after the finalizer's removal deleted the connector.
    def offsets_deleted() -> None:
        assert [m for _, r, m in cluster.events("orders") if r == "OffsetsDeleted"] == [
            f"deleted {len(mine)} offset records of orders from topic {prefix}-offsets"]

    eventually(offsets_deleted, STEP_TIMEOUT, "the OffsetsDeleted event")
