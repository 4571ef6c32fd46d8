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
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, TopicPartition
from connectstandalone import ConnectDistributed, vitess_connector_config
from local_mode_fixtures import Run, control, shardcdc
from polling import wait_for

from cdcoperator.local.control import ControlClient
from cdcworker.offsets.edits import entries
from cdcworker.offsets.store import OffsetStore
from localkafka import KafkaBroker, consume_all
from localkafka.client import ConsumedRecord
from shardcdc_cli.materialise import compare, materialise
from vtgatesim import VTGateSim
from vtgatesim.faults import FaultPlan
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
    again: bool = False  # then a second round: Debezium -> shardcdc (a new adoption) -> Debezium
    copy_rows: int = 0  # rows before Debezium starts, copied slowly: both switches happen mid-copy


LAYOUTS = {
    "a-2tasks-2shards-back-2-twice": Layout(2, 2, 2, 2, again=True),
    "b-2tasks-4shards-shardcdc-3-back-4": Layout(4, 2, 3, 4),
    "b-2tasks-4shards-shardcdc-3-back-2": Layout(4, 2, 3, 2),
    "c-no-per-task-1task": Layout(2, 1, 2, 1, per_task=False),
    "d-during-copy-2tasks-2shards": Layout(2, 2, 2, 2, copy_rows=6000),
}
COPY_PACKET = 1024  # bytes per copy response: a few dozen rows
COPY_DELAY = 0.2  # seconds per response: a shard's copy takes ~20 s, streaming keeps up at 3 tx/s


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


def copying(broker: KafkaBroker, offsets: str) -> bool:
    """Whether the newest generation's offsets hold an unfinished copy (``table_p_ks``)."""
    with OffsetStore({"bootstrap.servers": broker.bootstrap}, offsets) as store:
        mine = [e for e in entries(store.load(), NAME) if e.positions()]
    newest = max(e.sort_key()[0] for e in mine)
    return any(sg.table_p_ks for e in mine if e.sort_key()[0] == newest for sg in e.positions())


def copy_positions(broker: KafkaBroker, offsets: str, gen: int) -> dict[str, int]:
    """Shard -> the id of the last copied row (its lastpk) in generation ``gen``'s offsets."""
    with OffsetStore({"bootstrap.servers": broker.bootstrap}, offsets) as store:
        mine = [e for e in entries(store.load(), NAME) if e.task_key is not None and e.task_key.gen == gen]
    return {sg.shard: int(t.lastpk.rows[0].values) for e in mine for sg in e.positions() for t in sg.table_p_ks}


def phase_of(record: ConsumedRecord, boundaries: Sequence[dict[int, int]]) -> int:
    return sum(1 for b in boundaries if record.offset >= b.get(record.partition, 0))


def _payload(data: bytes) -> Any:
    doc = orjson.loads(data)
    return doc["payload"] if isinstance(doc, dict) and "schema" in doc and "payload" in doc else doc


def duplicates_and_order(records: Sequence[ConsumedRecord], boundaries: Sequence[dict[int, int]],
                         copying: bool = False) -> tuple[Counter[int], list[str]]:
    """Duplicates per phase (a change seen before: same key, op and row images; each update changes
    the row, and ids are never reused), and
    per-key order problems among the first deliveries: each change's ``before`` must be the key's
    previous ``after`` (a create follows nothing or a delete).

    ``copying``: during a VStream copy Vitess sends every change of a table whose copy has begun,
    rows beyond the lastpk too (uvstreamer.shouldSendEventForTable; isRowCopied is not implemented),
    and copies those rows later with their newer state. So a change may come for a key not seen
    yet, and a copied row may come for a key already seen; its ``after`` must then be the newest
    state, which the comparison with the source table checks."""
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
        before, after = _comparable(p.get("before")), _comparable(p["after"])
        if copying and ((p["op"] in ("u", "d") and prev is None) or p["op"] == "c"):
            last[r.key] = after
            continue
        if p["op"] in ("u", "d") and before != prev:
            problems.append(f"phase {phase_of(r, boundaries)} offset {r.offset}: {p['op']} before={p['before']} but "
                            f"the previous after was {prev}")
        if p["op"] == "c" and prev is not None:
            problems.append(f"phase {phase_of(r, boundaries)} offset {r.offset}: created again while it existed: {prev}")
        last[r.key] = after
    return dups, problems


def _comparable(image: dict[str, Any] | None) -> dict[str, Any] | None:
    """A row image with its DECIMAL text normalised: the same value is ``0.61`` when a copy read it
    and ``.61`` in a binlog row image (Vitess's legacy binlog text, which the simulator reproduces),
    from Debezium and shardcdc alike."""
    if image is None or not isinstance(image.get("price"), str):
        return image
    return {**image, "price": str(Decimal(image["price"]))}


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Iterator[VTGateSim]:
    layout = LAYOUTS[request.node.callspec.params["case"]]
    with VTGateSim(packet_size=COPY_PACKET if layout.copy_rows else 250_000) as s:
        if layout.copy_rows:
            s.inject(FaultPlan(delay_per_response=COPY_DELAY), next_stream=False)
        s.create_keyspace(KEYSPACE, ["-80", "80-"] if layout.shards == 2 else ["-40", "40-80", "80-c0", "c0-"])
        yield s


@dataclass
class Migration:
    """One run's names, switch boundaries and what the copy case needs to bound duplicates."""

    layout: Layout
    sim: VTGateSim
    broker: KafkaBroker
    tmp: Path
    prefix: str = field(default_factory=lambda: f"mig{uuid.uuid4().hex[:6]}")
    boundaries: list[dict[int, int]] = field(default_factory=list)
    debezium_copied: dict[str, int] = field(default_factory=dict)  # shard -> Debezium's stored lastpk
    workload_first_id: int = 0  # ids below it were there before the live workload (copied)

    @property
    def offsets(self) -> str:
        return f"{self.prefix}-connect-offsets"

    @property
    def topic(self) -> str:
        return f"{self.prefix}.{KEYSPACE}.items"

    def seed(self, workload: Workload) -> None:
        workload.ensure_table()
        workload.run(transactions=20)  # copied by Debezium's initial snapshot
        if self.layout.copy_rows:
            ids = range(workload.next_id, workload.next_id + self.layout.copy_rows)
            for lo in range(0, len(ids), 500):
                self.sim.execute("insert into items (id, name, qty, price) values "
                                 + ", ".join(f"({i}, 'c{i}', 1, 2.50)" for i in ids[lo:lo + 500]), KEYSPACE)
            workload.ids += list(ids)  # the live workload changes and deletes rows being copied
            workload.next_id = ids[-1] + 1
        self.workload_first_id = workload.next_id

    def grows(self, what: str) -> None:
        before = count(self.broker, self.topic)
        wait_for(lambda: count(self.broker, self.topic) > before + 60, STEP, what)

    def switch(self, who: str) -> None:
        """The previous writer has stopped: record the boundary and check it stopped mid-copy (or not)."""
        self.boundaries.append(ends(self.broker, self.topic))
        assert copying(self.broker, self.offsets) == bool(self.layout.copy_rows), f"{who} stopped mid-copy"

    def shardcdc_phase(self, generation: int, previous_tasks: int, round_: int) -> tuple[Path, Path]:
        """shardcdc adopts Debezium's offsets (its first generation is ``generation``, after
        Debezium's ``previous_tasks`` tasks) and streams (and copies); `shardcdc run` stops."""
        layout = self.layout
        path = manifest(self.tmp / f"connector{round_}.yaml", self.sim, self.broker, self.prefix, self.offsets,
                        layout.shardcdc_tasks)
        state = self.tmp / f"state{round_}"  # a new CdcConnector: nothing recorded, so it adopts
        run = Run(path, state, self.tmp / f"run{round_}.log")
        try:
            client = wait_for(lambda: run.alive() or control(state, NAME), STEP, "shardcdc's control endpoint")
            a = wait_for(lambda: started(client, generation, layout.shardcdc_tasks),
                         STEP, f"shardcdc's first generation ({generation}) running from Debezium's offsets")
            if layout.per_task:
                assert a["previousTasks"] == previous_tasks
            self.grows("shardcdc streaming")
            if layout.copy_rows:  # shardcdc's copy has gone on from Debezium's lastpk on every shard
                wait_for(lambda: all(copy_positions(self.broker, self.offsets, 1).get(s, 0) > pk
                                     for s, pk in self.debezium_copied.items()), STEP, "shardcdc copying")
        finally:
            assert run.stop() == 0, run.output()[-3000:]
        self.switch("shardcdc")
        return path, state

    def hand_back(self, connect: ConnectDistributed, config: dict[str, str], path: Path, state: Path
                  ) -> dict[str, str]:
        """``shardcdc offsets handback``, then Debezium resumes with the printed settings."""
        layout = self.layout
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
        self.grows("Debezium streaming again")
        return config

    def verify(self) -> None:
        """Per-key order, and duplicates per switch within their bound."""
        layout, boundaries = self.layout, self.boundaries
        records = consume_all(self.broker.bootstrap, self.topic)
        dups, problems = duplicates_and_order(records, boundaries, copying=bool(layout.copy_rows))
        assert problems == [], "\n".join(problems)
        # A phase that started over (a new copy, or streaming from an older position) repeats whole
        # transactions of many keys: more duplicates than the bound, or a create of an existing key.
        # Mid-copy a shard may also repeat one copy transaction (a packet of ~14-byte rows), and the
        # rows Debezium had sent beyond the lastpk it stored when it stopped (its offsets lag its
        # output) are copied again by whoever continues the copy.
        overrun = sum(1 for r in records if r.value and phase_of(r, boundaries) == 0 and _copied_beyond(
            _payload(r.value), self.debezium_copied, self.workload_first_id)) if layout.copy_rows else 0
        bound = layout.shards * (BATCH_MAX + (COPY_PACKET // 14 if layout.copy_rows else 0)) + overrun
        switches = [dups[i] for i in range(1, len(boundaries) + 1)]
        assert dups[0] == 0 and all(d <= bound for d in switches), (dups, bound, overrun)
        assert sum(switches) <= len(switches) * (bound - overrun) + overrun, (dups, bound, overrun)
        ops = Counter((phase_of(r, boundaries), _payload(r.value)["op"]) for r in records if r.value)
        print(f"records per (phase, op): {dict(ops)}")
        print(f"duplicates per switch (Debezium->shardcdc, shardcdc->Debezium, ...): {switches} (bound {bound}; "
              f"rows Debezium sent beyond its stored lastpk: {overrun})")


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_debezium_to_shardcdc_and_back(tmp_path: Path, kafka_broker: KafkaBroker, sim: VTGateSim, case: str) -> None:
    layout = LAYOUTS[case]
    m = Migration(layout, sim, kafka_broker, tmp_path)
    workload = Workload(sim, KEYSPACE, table="items", seed=11, batch_max=BATCH_MAX)
    m.seed(workload)
    writer = threading.Thread(target=workload.run, kwargs={"rate": 3.0 if layout.copy_rows else 15.0}, daemon=True)
    config = debezium_config(sim, m.prefix, layout)
    with ConnectDistributed(kafka_broker.bootstrap, f"{m.prefix}-connect", m.offsets, workdir=tmp_path / "connect") \
            as connect:
        try:
            # 1. Debezium copies and streams under the live workload, then stops (its tasks flush offsets).
            connect.configure(config)
            connect.wait_state(NAME, "RUNNING", layout.debezium_tasks, timeout=STEP)
            writer.start()
            wait_for(lambda: count(kafka_broker, m.topic) > 60, STEP, "Debezium streaming")
            connect.stop_connector(NAME)
            m.switch("Debezium")
            m.debezium_copied = copy_positions(kafka_broker, m.offsets, 0) if layout.copy_rows else {}
            # 2. shardcdc adopts its offsets, streams, stops; 3. the hand-back, and Debezium again.
            path, state = m.shardcdc_phase(adopted_generation(layout), layout.debezium_tasks, 0)
            config = m.hand_back(connect, config, path, state)
            if layout.again:  # Debezium's newest generation is the hand-back's: shardcdc adopts after it
                connect.stop_connector(NAME)
                m.switch("Debezium")
                gen = int(config["vitess.offset.storage.task.key.gen"])
                path, state = m.shardcdc_phase(gen + 1, layout.back_tasks, 1)
                m.hand_back(connect, config, path, state)
        finally:
            workload.stop()
            if writer.is_alive():
                writer.join(30)
        truth = sim.source_truth(KEYSPACE, "items")

        def caught_up() -> bool:
            connect.check()
            diff = compare(materialise(consume_all(kafka_broker.bootstrap, m.topic)), truth, "id",
                           ["id", "name", "qty", "price"])
            assert diff.empty, diff.summary()
            return True

        wait_for(caught_up, STEP, "the topic equal to the source table")
    m.verify()


def _copied_beyond(payload: dict[str, Any], lastpk: dict[str, int], workload_first_id: int) -> bool:
    """A copied row (not one the live workload inserted) beyond its shard's stored lastpk."""
    after = payload.get("after") or {}
    shard = payload["source"].get("shard")
    return payload["op"] == "c" and after.get("id", 0) < workload_first_id and after.get("id", 0) > lastpk.get(shard, 1 << 62)


def started(client: ControlClient, generation: int, tasks: int) -> dict[str, Any] | None:
    """The assignment once ``generation`` runs with ``tasks`` tasks (Ready waits for a copy to end)."""
    a = (client.get().get("status") or {}).get("assignment") or {}
    return a if (a.get("generation"), a.get("tasks"), a.get("phase")) == (generation, tasks, "Running") else None


def adopted_generation(layout: Layout) -> int:
    """Debezium ran generation 0 (per-task) or wrote only the server key: shardcdc's first generation."""
    return 1 if layout.per_task else 0

