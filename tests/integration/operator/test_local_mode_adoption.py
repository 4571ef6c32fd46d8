"""Migration from Debezium: the first generation adopts the offsets already in the offsets topic.

Debezium-format records (key and value bytes as Kafka Connect writes them, on the partition
Connect's murmur2 picks) are written to a real broker: per-task offsets of generation 3 with 2
tasks at the source's current positions, plus decoys an adoption must ignore (an older
generation and a plain ``{"server": ...}`` record at stale positions, another server, another
connector). A CdcConnector of the same name then runs in local mode, which is the operator's own
reconcile: its first generation must be 4 with ``previousTasks`` 2, and the workers must continue
from generation 3's positions: exactly the rows written after them reach the topic, no snapshot
(``op: r``) and nothing from before.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from operator_kube_fixtures import wait_for

from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS
from cdcoperator.local.runner import LocalRunner, RunnerThread
from cdcworker.offsets.javacompat import java_murmur2_partition
from cdcworker.offsets.store import OffsetStore
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

STEP = 60.0
NAME = "mig"


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("shop", ["-80", "80-"])
        yield s


def debezium_key(connector: str, server: str, task_key: str | None) -> bytes:
    partition = f'{{"server":"{server}","task_key":"{task_key}"}}' if task_key else f'{{"server":"{server}"}}'
    return f'["{connector}",{partition}]'.encode()


def debezium_value(positions: dict[str, str]) -> bytes:
    vgtid = json.dumps([{"keyspace": "shop", "shard": s, "gtid": g, "table_p_ks": []} for s, g in positions.items()],
                       separators=(",", ":"))
    return json.dumps({"transaction_id": None, "vgtid": vgtid}, separators=(",", ":")).encode()


def write_offsets(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    with OffsetStore({"bootstrap.servers": bootstrap}, topic) as store:
        partitions = store.ensure_topic()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=java_murmur2_partition(key, partitions))
    assert producer.flush(30) == 0
    del producer  # closes it before the broker stops


def insert(sim: VTGateSim, ids: range) -> None:
    for i in ids:
        sim.execute(f"insert into items (id, name, qty, price) values ({i}, 'n{i}', {i % 7}, 1.50)", "shop")


def test_first_generation_adopts_debezium_per_task_offsets(tmp_path: Path, kafka_broker: KafkaBroker,
                                                            sim: VTGateSim) -> None:
    prefix = f"ad{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}-offsets"
    Workload(sim, "shop", table="items").ensure_table()
    insert(sim, range(1, 21))
    stale = sim.positions("shop")
    insert(sim, range(21, 41))
    stopped_at = sim.positions("shop")  # where "Debezium" stopped: generation 3's offsets
    write_offsets(kafka_broker.bootstrap, topic, [
        (debezium_key(NAME, prefix, None), debezium_value(stale)),
        (debezium_key(NAME, prefix, "task0_1_2"), debezium_value(stale)),
        (debezium_key(NAME, prefix, "task0_2_3"), debezium_value({"-80": stopped_at["-80"]})),
        (debezium_key(NAME, prefix, "task1_2_3"), debezium_value({"80-": stopped_at["80-"]})),
        (debezium_key(NAME, "other-server", "task0_1_9"), debezium_value(stale)),
        (debezium_key("other-connector", prefix, "task0_1_7"), debezium_value(stale)),
    ])
    insert(sim, range(41, 51))  # written while nothing streamed: must arrive, once

    body: dict[str, Any] = {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": NAME},
        "spec": {"source": {"vitess": {"vtgate": sim.address, "keyspace": "shop"}},
                 "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topicPrefix": prefix, "offsetsTopic": topic},
                 "tasks": 2,
                 "config": {"offset.storage.replication.factor": "1", "offset.flush.interval.ms": "200"}},
    }
    runner = LocalRunner(body, tmp_path / "state", resync=1.0, restart_backoff=2.0, control=False)
    with RunnerThread(runner):
        def streaming() -> dict[str, Any] | None:
            status = (runner.cluster.connector("default", NAME) or {}).get("status") or {}
            ready = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
            return status if ready.get("status") == "True" else None

        status = wait_for(streaming, STEP, "the first generation streaming")
        a = status["assignment"]
        assert (a["generation"], a["tasks"], a["previousTasks"]) == (4, 2, 2)
        assert [t["shards"] for t in a["taskStates"]] == [["-80"], ["80-"]]
        assert status["adoptedOffsets"] == {"generation": 3, "tasks": 2, "keys": ["task0_2_3", "task1_2_3"],
                                            "serverKey": True, "shards": ["-80", "80-"],
                                            "chain": [{"generation": 3, "tasks": 2}, {"generation": 2, "tasks": 1}]}
        assert a["history"] == status["adoptedOffsets"]["chain"]
        insert(sim, range(51, 61))
        final = sim.positions("shop")

        def caught_up() -> bool:
            a = ((runner.cluster.connector("default", NAME) or {}).get("status") or {}).get("assignment") or {}
            return [t.get("position") for t in a.get("taskStates") or ()] == [
                f"-80@{final['-80']}", f"80-@{final['80-']}"]

        wait_for(caught_up, STEP, "both tasks at the source's final positions")
        cms = {c["metadata"]["name"]: c for c in runner.cluster.children(CONFIG_MAPS)}
    events = [(e["type"], e["reason"], e["message"]) for e in runner.events]
    assert events[:2] == [
        ("Normal", "AdoptedOffsets",
         "found per-task offsets of generation 3 with 2 tasks (task0_2_3, task1_2_3) for shards -80, 80-; "
         "starting at generation 4 with previous tasks 2, so every shard resumes from them"),
        ("Normal", "GenerationStarted",
         "generation 4 started: 2 tasks over 2 shards (previous tasks 2; AdoptedOffsets)"),
    ]
    # The generation's config, the tasks' identities, and the record of which tasks stored
    # positions (the OffsetsLost guard).
    assert sorted(cms) == ["mig-g4-workers", "mig-positions"]
    dep = next(d for d in runner.cluster.children(DEPLOYMENTS) if d["metadata"]["name"] == "mig-g4-t1")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["SHARDCDC_VITESS_OFFSET_STORAGE_TASK_KEY_GEN"], env["SHARDCDC_VITESS_PREV_NUM_TASKS"],
            env["SHARDCDC_TASKS_MAX"]) == ("4", "2", "2")

    # Continued from generation 3's positions: rows 41-60 exactly once, no snapshot, nothing older.
    changes = []
    for r in consume_all(kafka_broker.bootstrap, f"{prefix}.shop.items"):
        if r.value is None:
            continue
        doc = json.loads(r.value)
        payload = doc.get("payload", doc)
        changes.append((payload["op"], payload["after"]["id"]))
    assert sorted(changes) == [("c", i) for i in range(41, 61)]


def test_scan_of_a_missing_topic_creates_nothing_and_errors_are_reported(kafka_broker: KafkaBroker) -> None:
    from confluent_kafka.admin import AdminClient

    from cdcoperator.adoption import Adoption, OffsetScanError, scan_offsets
    from cdcoperator.model import ConnectorResource
    from kubetest.controlplane import free_port

    def cr(bootstrap: str, **kafka: Any) -> ConnectorResource:
        return ConnectorResource.from_body({"metadata": {"name": NAME}, "spec": {
            "source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "shop"}},
            "kafka": {"bootstrapServers": bootstrap, "topicPrefix": "p", "offsetsTopic": "missing-offsets", **kafka}}})

    assert scan_offsets(cr(kafka_broker.bootstrap)) == Adoption()
    # Not auto-created by the look-up (it would get cleanup.policy=delete, which the workers refuse).
    topics = AdminClient({"bootstrap.servers": kafka_broker.bootstrap}).list_topics(timeout=10).topics
    assert "missing-offsets" not in topics
    with pytest.raises(OffsetScanError, match=r"reading offsets topic missing-offsets at 127\.0\.0\.1:\d+: "):
        scan_offsets(cr(f"127.0.0.1:{free_port()}"), timeout=2)
    # SASL without credentials the operator can read: skipped with the reason, not an error.
    assert scan_offsets(cr("kafka:9093", securityProtocol="SASL_SSL")) == Adoption(
        skipped=f"the Kafka cluster of {NAME} needs SASL credentials, and the operator reads them only from "
                "spec.kafka.securitySecretRef")
