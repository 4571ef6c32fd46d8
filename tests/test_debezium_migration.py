"""Debezium -> shardcdc -> Debezium with the real Debezium Vitess connector in Kafka Connect
distributed mode, the real broker and a live workload from the VTGate test server (issue 29).

Debezium starts with ``snapshot.mode=initial`` and streams while the workload writes; it is stopped
(``PUT /connectors/<n>/stop``), ``shardcdc run`` with the same name, prefix and offsets topic adopts
its offsets and streams, is stopped, ``shardcdc offsets handback`` prepares the offsets and prints
the settings, and Debezium resumes with them. The workload never pauses. The topic, materialised,
must equal the source table (nothing missing, no stale value); every change of a key must follow
the one before it (its ``before`` is the previous ``after``: per-key order, nothing lost between);
and at each switch the only duplicates are the transaction after the stored position of each shard.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from connectstandalone import ConnectDistributed, vitess_connector_config
from local_mode_fixtures import Run, control, ready, shardcdc
from polling import wait_for

from cdcworker.verify import compare, materialise
from localkafka import KafkaBroker, consume_all
from localkafka.client import ConsumedRecord
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

STEP = 120.0
NAME = "orders"
KEYSPACE = "shop"
BATCH_MAX = 5  # rows per workload transaction: the bound on one shard's replayed transaction


@dataclass(frozen=True)
class Layout:
    shards: int
    debezium_tasks: int
    shardcdc_tasks: int
    back_tasks: int
    per_task: bool = True


LAYOUTS = {
    "a-2tasks-2shards-back-2": Layout(2, 2, 2, 2),
    "b-2tasks-4shards-shardcdc-3-back-4": Layout(4, 2, 3, 4),
    "b-2tasks-4shards-shardcdc-3-back-2": Layout(4, 2, 3, 2),
    "c-no-per-task-1task": Layout(2, 1, 2, 1, per_task=False),
}


def debezium_config(sim: VTGateSim, prefix: str, layout: Layout) -> dict[str, str]:
    extra = {"snapshot.mode": "initial", "tasks.max": str(layout.debezium_tasks)}
    if layout.per_task:
        extra |= {"vitess.offset.storage.per.task": "true", "vitess.offset.storage.task.key.gen": "0",
                  "vitess.prev.num.tasks": "1"}
    return vitess_connector_config(NAME, prefix, sim.address, KEYSPACE, extra)


def manifest(path: Path, sim: VTGateSim, broker: KafkaBroker, prefix: str, offsets: str, tasks: int) -> Path:
    path.write_text(f"""\
apiVersion: shardcdc.io/v1alpha1
kind: CdcConnector
metadata:
  name: {NAME}
spec:
  source:
    vitess:
      vtgate: "{sim.address}"
      keyspace: {KEYSPACE}
  kafka:
    bootstrapServers: "{broker.bootstrap}"
    topicPrefix: {prefix}
    offsetsTopic: {offsets}
  tasks: {tasks}
  snapshot:
    mode: initial
  config:
    offset.flush.interval.ms: "200"
""")
    return path


def handback_settings(output: str) -> tuple[dict[str, str], list[str]]:
    """The settings ``shardcdc offsets handback`` printed: (key -> value, keys to remove)."""
    lines = output.split("Debezium Vitess connector settings (the rest of its configuration unchanged):\n", 1)[1]
    settings, remove = {}, []
    for line in lines.splitlines():
        if line.startswith("  remove "):
            remove.append(line.removeprefix("  remove "))
        elif line.startswith("  "):
            key, _, val = line.strip().partition("=")
            settings[key] = val
    return settings, remove


def ends(broker: KafkaBroker, topic: str) -> dict[int, int]:
    """The high watermark of every partition of the topic (none before it exists): a switch's
    boundary, taken once the previous writer has stopped. Watermarks, not a read: a read to the
    end of a partition an exactly-once worker is writing to may never see the end."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"t-{uuid.uuid4()}"})
    try:
        meta = c.list_topics(topic, timeout=10).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in meta.partitions}
    finally:
        c.close()


def count(broker: KafkaBroker, topic: str) -> int:
    """Offsets used in the topic so far (records and transaction markers)."""
    return sum(ends(broker, topic).values())


def phase_of(record: ConsumedRecord, boundaries: Sequence[dict[int, int]]) -> int:
    return sum(1 for b in boundaries if record.offset >= b.get(record.partition, 0))


def _payload(data: bytes) -> Any:
    doc = orjson.loads(data)
    return doc["payload"] if isinstance(doc, dict) and "schema" in doc and "payload" in doc else doc


def duplicates_and_order(records: Sequence[ConsumedRecord], boundaries: Sequence[dict[int, int]]
                         ) -> tuple[Counter[int], list[str]]:
    """Duplicates per phase (a change seen before: same key, op and row images; each update changes
    the row, and ids are never reused), and
    per-key order problems among the first deliveries: each change's ``before`` must be the key's
    previous ``after`` (a create follows nothing or a delete)."""
    seen: set[bytes] = set()
    dups: Counter[int] = Counter()
    last: dict[bytes, Any] = {}
    problems: list[str] = []
    for r in records:
        if r.key is None or r.value is None:
            continue
        p = _payload(r.value)
        ident = orjson.dumps([r.key.decode(), p["op"], p.get("before"), p["after"]])
        if ident in seen:
            dups[phase_of(r, boundaries)] += 1
            continue
        seen.add(ident)
        prev = last.get(r.key)
        if p["op"] in ("u", "d") and p["before"] != prev:
            problems.append(f"{r.key!r} {p['op']} before={p['before']} but the previous after was {prev}")
        if p["op"] == "c" and prev is not None:
            problems.append(f"{r.key!r} created again while it existed: {prev}")
        last[r.key] = p["after"]
    return dups, problems


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Iterator[VTGateSim]:
    layout = LAYOUTS[request.node.callspec.params["case"]]
    with VTGateSim() as s:
        s.create_keyspace(KEYSPACE, ["-80", "80-"] if layout.shards == 2 else ["-40", "40-80", "80-c0", "c0-"])
        yield s


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_debezium_to_shardcdc_and_back(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim, case: str) -> None:
    layout = LAYOUTS[case]
    prefix = f"mig{uuid.uuid4().hex[:6]}"
    offsets = f"{prefix}-connect-offsets"
    topic = f"{prefix}.{KEYSPACE}.items"
    workload = Workload(sim, KEYSPACE, table="items", seed=11, batch_max=BATCH_MAX)
    workload.ensure_table()
    workload.run(transactions=20)  # copied by Debezium's initial snapshot
    writer = threading.Thread(target=workload.run, kwargs={"rate": 15.0}, daemon=True)
    boundaries: list[dict[int, int]] = []
    config = debezium_config(sim, prefix, layout)
    with ConnectDistributed(kafka_broker.bootstrap, f"{prefix}-connect", offsets, workdir=tmp_path / "connect") as connect:
        try:
            # 1. Debezium streams under the live workload, then stops (its tasks flush their offsets).
            connect.configure(config)
            connect.wait_state(NAME, "RUNNING", layout.debezium_tasks, timeout=STEP)
            writer.start()
            wait_for(lambda: count(kafka_broker, topic) > 60, STEP, "Debezium streaming")
            connect.stop_connector(NAME)
            boundaries.append(ends(kafka_broker, topic))

            # 2. shardcdc adopts Debezium's offsets and streams; `shardcdc run` stops (workers commit).
            path = manifest(tmp_path / "connector.yaml", sim, kafka_broker, prefix, offsets, layout.shardcdc_tasks)
            state = tmp_path / "state"
            run = Run(path, state, tmp_path / "run.log")
            try:
                client = wait_for(lambda: run.alive() or control(state, NAME), STEP, "shardcdc's control endpoint")
                a = wait_for(lambda: ready(client, adopted_generation(layout), layout.shardcdc_tasks, layout.shards),
                             STEP, "shardcdc streaming from Debezium's offsets")
                if layout.per_task:
                    assert a["previousTasks"] == layout.debezium_tasks
                before = count(kafka_broker, topic)
                wait_for(lambda: count(kafka_broker, topic) > before + 60, STEP, "shardcdc streaming")
            finally:
                assert run.stop() == 0, run.output()[-3000:]
            boundaries.append(ends(kafka_broker, topic))

            # 3. The hand-back, then Debezium resumes with the printed settings.
            args = ["offsets", "handback", NAME, "--local", "-f", str(path), "--state-dir", str(state), "--yes"]
            args += ["--no-per-task"] if not layout.per_task else ["--tasks-max", str(layout.back_tasks)]
            r = shardcdc(*args)
            assert r.returncode == 0, r.stdout + r.stderr
            print(f"$ shardcdc {' '.join(args)}\n{r.stdout}")  # the recipe's output in docs/operations.md
            settings, remove = handback_settings(r.stdout)
            config = {k: v for k, v in (config | settings).items() if k not in remove}
            assert config["tasks.max"] == str(layout.back_tasks)
            connect.configure(config)
            connect.resume(NAME)
            connect.wait_state(NAME, "RUNNING", layout.back_tasks, timeout=STEP)
            if layout.per_task:
                gen = settings["vitess.offset.storage.task.key.gen"]
                keys = sorted(t["vitess.task.key"] for t in connect.task_configs(NAME))
                assert keys == [f"task{i}_{layout.back_tasks}_{gen}" for i in range(layout.back_tasks)]
            before = count(kafka_broker, topic)
            wait_for(lambda: count(kafka_broker, topic) > before + 60, STEP, "Debezium streaming again")
        finally:
            workload.stop()
            if writer.is_alive():
                writer.join(30)
        truth = sim.source_truth(KEYSPACE, "items")

        def caught_up() -> bool:
            connect.check()
            diff = compare(materialise(consume_all(kafka_broker.bootstrap, topic)), truth, "id",
                           ["id", "name", "qty", "price"])
            assert diff.empty, diff.summary()
            return True

        wait_for(caught_up, STEP, "the topic equal to the source table")

    records = consume_all(kafka_broker.bootstrap, topic)
    dups, problems = duplicates_and_order(records, boundaries)
    assert problems == []
    # A phase that started over (a new copy, or streaming from an older position) repeats whole
    # transactions of many keys: more duplicates than the bound, or a create of an existing key.
    ops = Counter((phase_of(r, boundaries), _payload(r.value)["op"]) for r in records if r.value)
    bound = layout.shards * BATCH_MAX
    assert dups[0] == 0 and dups[1] <= bound and dups[2] <= bound, (dups, bound)
    print(f"records per (phase, op): {dict(ops)}")
    print(f"duplicates per switch: Debezium->shardcdc {dups[1]}, shardcdc->Debezium {dups[2]} (bound {bound})")


def adopted_generation(layout: Layout) -> int:
    """Debezium ran generation 0 (per-task) or wrote only the server key: shardcdc's first generation."""
    return 1 if layout.per_task else 0

