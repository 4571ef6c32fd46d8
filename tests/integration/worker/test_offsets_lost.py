"""Stored offsets that vanish after a connector streamed: no silent new copy (issue 28, case 7).

On the old code a tombstoned or deleted offsets record made the worker start from ``snapshot.mode``
and copy every table again, silently. Now the operator tells each task whether it stored positions
(``shardcdc.task.offsets.expected`` from the ``<name>-positions`` ConfigMap); a task that finds
none stops with ``OffsetsLost``, the connector shows the condition with the last known positions,
and ``shardcdc.io/offsets-lost=restore|resnapshot`` resolves it.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from local_mode_fixtures import Run, control, ready, shardcdc
from polling import wait_for
from worker_fixtures import running_task, worker_config

from cdcoperator.local.annotate import parse_annotation
from cdcoperator.model import ConnectorResource
from cdcoperator.offsetslost import (
    EXPECTED_ENV,
    expected_env_var,
    kept_positions,
    lost_tasks,
    parse_positions,
    restore_records,
)
from cdcoperator.planner import Generation, GenPhase
from cdcoperator.taskstatus import PodSummary
from cdcworker import exitcodes
from cdcworker.config import load_config
from cdcworker.offsets import OffsetPartition, Vgtid
from cdcworker.offsets.keys import offset_record_key
from cdcworker.offsets.lost import OffsetsLostError, check_not_lost
from cdcworker.offsets.store import OffsetStore
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import compare, materialise
from vtgatesim import VTGateSim

STEP = 90.0
DDL = ["CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR(32), PRIMARY KEY (id))"]


# --- the worker's guard (pure) --------------------------------------------------------------------


def test_guard_refuses_a_fresh_start_only_when_positions_were_expected() -> None:
    sources = {"-80": "stored", "80-": "config"}
    check_not_lost(sources, expected=False, connector_name="orders", key="k", topic="t")  # never ran: fine
    check_not_lost({"-80": "previous-generation"}, expected=True, connector_name="orders", key="k", topic="t")
    with pytest.raises(OffsetsLostError) as caught:
        check_not_lost(sources, expected=True, connector_name="orders", key='["orders",{"server":"shop"}]',
                       topic="shop-offsets")
    message = str(caught.value)
    assert message.startswith('OffsetsLost: the stored offsets of task key ["orders",{"server":"shop"}] for '
                              "shard(s) 80- are gone from topic 'shop-offsets'")
    assert "kubectl annotate cdc/orders shardcdc.io/offsets-lost=restore" in message
    assert "shardcdc.io/offsets-lost=resnapshot" in message and "\n" not in message


def test_the_expectation_is_a_property_set_through_the_environment() -> None:
    assert EXPECTED_ENV == "SHARDCDC_SHARDCDC_TASK_OFFSETS_EXPECTED"
    assert expected_env_var("orders", 2, 1) == {"name": EXPECTED_ENV, "valueFrom": {"configMapKeyRef": {
        "name": "orders-positions", "key": "task-2-1", "optional": True}}}
    base = {"name": "c", "topic.prefix": "p", "database.hostname": "h", "vitess.keyspace": "ks",
            "bootstrap.servers": "b:1", "offset.storage.topic": "o"}
    assert not load_config([], env={}, overrides=base).task.offsets_expected
    assert load_config([], env={EXPECTED_ENV: "true"}, overrides=base).task.offsets_expected


# --- the operator's side (pure) -----------------------------------------------------------------


def _pod(task: int, message: str, ready: bool = False, generation: int = 1) -> PodSummary:
    return PodSummary(f"c-g{generation}-t{task}-x", generation, task, "Running", False, "10.0.0.1", 8080, ready,
                      "CrashLoopBackOff", 1, message, 3)


def test_lost_tasks_are_those_stopped_with_offsets_lost_and_not_recovered() -> None:
    lost = json.dumps({"error": "OffsetsLost: ...", "reason": "OffsetsLost"})
    pods = [_pod(0, lost), _pod(1, json.dumps({"error": "other"})), _pod(2, lost, ready=True),
            _pod(3, lost, generation=0), _pod(4, "not json")]
    assert lost_tasks(pods, 1) == (0,)


def test_last_positions_are_kept_and_restored_under_the_task_keys() -> None:
    status = {"assignment": {"generation": 1, "taskStates": [
        {"id": 0, "shards": ["-80"], "position": "-80@MySQL56/a:1-9"},
        {"id": 1, "shards": ["80-"], "position": "80-@MySQL56/b:1-4;c0-@MySQL56/c:1-2"}, {"id": 2}]}}
    assert kept_positions(status, 1) == {0: "-80@MySQL56/a:1-9", 1: "80-@MySQL56/b:1-4;c0-@MySQL56/c:1-2"}
    assert kept_positions(status, 2) == {}  # another generation's positions are not this one's
    with pytest.raises(ValueError, match="not <shard>@<gtid>"):
        parse_positions("-80:MySQL56/a:1-9")
    body = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
            "metadata": {"name": "orders", "namespace": "shop", "uid": "u"},
            "spec": {"source": {"vitess": {"vtgate": "h:1", "keyspace": "commerce"}},
                     "kafka": {"bootstrapServers": "b:1", "topicPrefix": "shop", "offsetsTopic": "o"}}}
    g = Generation(generation=1, task_count=3, prev_task_count=1, assignment=(("-80",), ("80-", "c0-"), ()),
                   phase=GenPhase.RUNNING)
    records = restore_records(ConnectorResource.from_body(body), g, {1: kept_positions(status, 1)[1]})
    assert [(p, v.vgtid) for p, v in records] == [
        (OffsetPartition.for_task("shop", 1, 3, 1),
         Vgtid.of("commerce", {"80-": "MySQL56/b:1-4", "c0-": "MySQL56/c:1-2"}))]


def test_flags_are_kept_for_the_current_generation_and_cleared_without_a_record() -> None:
    from cdcoperator.offsetslost import _wanted_flags

    g = Generation(generation=2, task_count=2, prev_task_count=1, assignment=(("-80",), ("80-",)), phase=GenPhase.RUNNING)
    old = {"task-1-0": "true", "task-2-0": "true"}
    assert _wanted_flags(old, g, reporting=[1], drop=[]) == {"task-2-0": "true", "task-2-1": "true"}
    assert _wanted_flags(old, g, reporting=[], drop=[0]) == {}  # resnapshot
    assert _wanted_flags(old, None, reporting=[], drop=[]) == {}  # the record was reset


def test_annotate_parses_kubectl_syntax() -> None:
    assert parse_annotation("shardcdc.io/offsets-lost=restore") == ("shardcdc.io/offsets-lost", "restore")
    assert parse_annotation("shardcdc.io/offsets-lost-") == ("shardcdc.io/offsets-lost", None)
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_annotation("restore")


# --- the worker against Kafka -------------------------------------------------------------------


def _records(broker: KafkaBroker, topic: str) -> list[Any]:
    try:
        return consume_all(broker.bootstrap, topic)
    except KafkaException as exc:  # not created yet
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
        return []


def test_worker_with_expected_positions_stops_instead_of_copying_again(
        kafka_broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    termination = tmp_path / "termination-log"
    monkeypatch.setenv("SHARDCDC_TERMINATION_LOG", str(termination))
    with VTGateSim() as sim:
        sim.create_keyspace("commerce", ["-80", "80-"], ddl=DDL)
        for i in range(1, 21):
            sim.execute(f"INSERT INTO items (id, name) VALUES ({i}, 'n{i}')", "commerce")
        cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"snapshot.mode": "initial"})
        topic = f"{cfg.topic_prefix}.commerce.items"
        with running_task(cfg) as run:
            wait_for(lambda: len(_records(kafka_broker, topic)) == 20, STEP, "the copy")
            run.stop()
        partition = OffsetPartition(cfg.topic_prefix)
        with OffsetStore({"bootstrap.servers": kafka_broker.bootstrap}, cfg.kafka.offsets_topic) as store:
            store.load()
            assert store.get(cfg.name, partition) is not None
            store.write(cfg.name, partition, None)  # the record is tombstoned
        before = len(consume_all(kafka_broker.bootstrap, topic))

        expecting = worker_config(kafka_broker, sim.address, "commerce", prefix=cfg.topic_prefix,
                                  extra={"snapshot.mode": "initial", "shardcdc.task.offsets.expected": "true"})
        with running_task(expecting) as run:
            result = run.wait(60)
        key = offset_record_key(cfg.name, partition).decode()
        assert result.exit_code == exitcodes.FAILED
        assert result.reason.startswith(f"OffsetsLost: the stored offsets of task key {key} for shard(s) -80, 80- ")
        assert json.loads(termination.read_text()) == {"error": result.reason, "reason": "OffsetsLost"}
        assert len(consume_all(kafka_broker.bootstrap, topic)) == before  # nothing copied again


# --- local mode: the condition, restore and resnapshot -------------------------------------------


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("shop", ["-80", "80-"], ddl=DDL)
        for i in range(1, 31):
            s.execute(f"INSERT INTO items (id, name) VALUES ({i}, 'n{i}')", "shop")
        yield s


def _creates(broker: KafkaBroker, topic: str) -> int:
    """Create events in the topic (0 before it exists): the VStream copy's rows are creates too, as
    Debezium's, so a copy made again shows as one more create per row."""
    return sum(1 for r in _records(broker, topic) if r.value and json.loads(r.value)["payload"]["op"] == "c")


def _condition(status: dict[str, Any], reason: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or () if c["type"] == "Ready" and c["reason"] == reason), None)


def _kill_worker(state: Path, task: str) -> None:
    """SIGKILL the worker process of ``task`` (its command line names its pod's directory under this
    test's state directory, ``<task>-<n>``): no final offset write."""
    pod_dir = str(state / "default" / "shop" / "pods" / "default" / task) + "-"
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and pod_dir in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                pids.append(int(proc.name))
        except OSError:
            continue
    assert pids, f"no worker process of {task}"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def _lose_offsets(broker: KafkaBroker, prefix: str, run: Run, client: Any, state: Path) -> str:
    """Tombstone the task's offsets record, kill its worker; returns the OffsetsLost message."""
    with OffsetStore({"bootstrap.servers": broker.bootstrap}, f"{prefix}-offsets") as store:
        store.load()
        partition = OffsetPartition.for_task(prefix, 0, 1, 0)
        assert store.get("shop", partition) is not None
        store.write("shop", partition, None)
    _kill_worker(state, "shop-g0-t0")
    cond = wait_for(lambda: run.alive() or _condition(client.get().get("status") or {}, "OffsetsLost"), STEP,
                    "the OffsetsLost condition")
    return str(cond["message"])


def test_local_mode_offsets_lost_condition_restore_and_resnapshot(
        tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim) -> None:
    prefix = f"ol{uuid.uuid4().hex[:6]}"
    state = tmp_path / "state"
    topic = f"{prefix}.shop.items"
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
  snapshot:
    mode: initial
  tasks: 1
  config:
    offset.storage.replication.factor: "1"
    offset.flush.interval.ms: "200"
""")
    run = Run(manifest, state, tmp_path / "run.log")
    try:
        client = wait_for(lambda: run.alive() or control(state, "shop"), STEP, "the control endpoint")
        wait_for(lambda: ready(client, 0, 1, 2), STEP, "generation 0 streaming")
        wait_for(lambda: _creates(kafka_broker, topic) == 30, STEP, "the initial copy")
        sim.execute("INSERT INTO items (id, name) VALUES (31, 'n31')", "shop")
        source = sim.positions("shop")
        want = ";".join(f"{s}@{source[s]}" for s in ("-80", "80-"))
        wait_for(lambda: (((client.get().get("status") or {}).get("assignment") or {}).get("taskStates")
                          or [{}])[0].get("position") == want, STEP, "the status showing the current positions")

        message = _lose_offsets(kafka_broker, prefix, run, client, state)
        assert f"Last known positions: task 0 (key task0_1_0): {want}." in message, message
        assert "shardcdc.io/offsets-lost=restore" in message
        events = [e for e in client.events() if e["reason"] == "OffsetsLost"]
        assert len(events) == 1 and events[0]["type"] == "Warning"
        # While lost: written at the source; nothing copied again.
        sim.execute("UPDATE items SET name = 'changed' WHERE id = 5", "shop")
        sim.execute("DELETE FROM items WHERE id = 6", "shop")
        assert _creates(kafka_broker, topic) == 31

        r = shardcdc("annotate", "shop", "shardcdc.io/offsets-lost=restore", "--state-dir", str(state))
        assert r.returncode == 0, r.stderr
        wait_for(lambda: run.alive() or ready(client, 0, 1, 2), STEP, "streaming again after restore")
        wait_for(lambda: compare(materialise(consume_all(kafka_broker.bootstrap, topic)),
                                 sim.source_truth("shop", "items"), "id", ["id", "name"]).empty, STEP,
                 "the topic equal to the source (nothing missed while lost)")
        assert _creates(kafka_broker, topic) == 31  # resumed, not copied again
        assert any(e["reason"] == "OffsetsRestored" and want in e["message"] for e in client.events())
        assert "shardcdc.io/offsets-lost" not in (client.get()["metadata"].get("annotations") or {})

        source = sim.positions("shop")
        want = ";".join(f"{s}@{source[s]}" for s in ("-80", "80-"))
        wait_for(lambda: ((client.get().get("status") or {}).get("assignment") or {})["taskStates"][0].get("position")
                 == want, STEP, "the status showing the positions again")
        _lose_offsets(kafka_broker, prefix, run, client, state)
        r = shardcdc("annotate", "shop", "shardcdc.io/offsets-lost=resnapshot", "--state-dir", str(state))
        assert r.returncode == 0, r.stderr
        # A new copy of the 30 rows the source holds now (31 created, 6 deleted).
        wait_for(lambda: run.alive() or _creates(kafka_broker, topic) == 31 + 30, STEP, "a new copy of every row")
        wait_for(lambda: ready(client, 0, 1, 2), STEP, "streaming after the new copy")
        assert any(e["reason"] == "OffsetsResnapshot" for e in client.events())
    finally:
        assert run.stop() == 0, run.output()[-3000:]
