"""The multi-process Vitess v24 cluster (etcd, vtctld, vtgate, one vttablet + mariadbd per shard),
shared by the module, keyspace ``customer`` over ``-80, 80-``:

1. a shard's primary vttablet and its mariadbd SIGKILLed and started again, then VTGate SIGKILLed
   and started again, while a worker streams under a workload: the worker never exits, changes
   resume within VTGate's and the worker's retry delays after each, and the topic equals the
   source with per-key order kept;
2. real ``Reshard`` workflows: a split 2 -> 4 shards, then a merge back 4 -> 2 (``create``,
   ``SwitchTraffic``, ``complete``), while local mode (``shardcdc run``, 2 tasks) streams under a
   workload. After each switch the workers follow the journal, local mode starts the next
   generation over the new shards, the topic equals the source (no duplicate, per-key order kept),
   and the operator's discovery sees exactly the new shards; in the merge each task holds 2 of its
   4 source shards and reads both up to their own journals. Beside the split, a VStream of the
   source shards catches the real journal, compared with the test server's journal of the same
   split (docs/fidelity.md, the differential suite).

The restart test runs first: the split and merge leave the keyspace on new tablets."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from local_mode_fixtures import Run, control, ready
from polling import wait_for
from realvitess_fixtures import (
    TABLE_DDL,
    Worker,
    Writer,
    per_key_order_kept,
    records,
    reshard_create,
    switch_traffic,
    topic_equals_source,
    vstream_queue,
    worker_props,
    workload,
    write_properties,
)

from cdcoperator.discovery import discover_via_vtctld
from cdcoperator.local.children import stop_group
from localkafka import KafkaBroker
from realvitess.cluster import VitessCluster
from realvitess.single import hash_vschema
from vitessapi import binlogdata_pb2, vtgate_pb2
from vtgatesim import VTGateSim
from vtgatesim.topology import keyspace_id

pytestmark = pytest.mark.realvitess

KS, TABLE, RESTART_TABLE = "customer", "items", "items_rs"
TARGETS = ["-40", "40-80", "80-c0", "c0-"]
# A split 2 -> 4, then a merge back 4 -> 2 (new tablets for -80 and 80-: the old shards are gone).
PLAN = [("split", ["-80", "80-"], TARGETS), ("merge", TARGETS, ["-80", "80-"])]
STEP = 180.0


class JournalWatch:
    """A VStream of the source shards from ``current`` with ``include_reshard_journal_events``, once
    positioned: the first JOURNAL event it sees (the differential suite's journal, docs/fidelity.md)."""

    def __init__(self, address: str, shards: list[str]) -> None:
        self.stop = threading.Event()
        self.events = vstream_queue(address, [(s, "current") for s in shards], [TABLE], self.stop, keyspace=KS,
                                    flags=vtgate_pb2.VStreamFlags(include_reshard_journal_events=True))
        first = self.events.get(timeout=STEP)  # positioned: later writes (and the journal) are streamed
        assert not isinstance(first, Exception), first

    def journal(self, timeout: float = STEP) -> binlogdata_pb2.Journal:
        deadline = time.monotonic() + timeout
        try:
            while True:
                ev = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
                assert not isinstance(ev, Exception), ev
                if ev.type == binlogdata_pb2.VEventType.JOURNAL:
                    return ev.journal
        finally:
            self.stop.set()


def journal_structure(j: binlogdata_pb2.Journal) -> dict[str, object]:
    """A journal without its values (GTIDs, positions, the id and workflow names)."""
    return {"migration_type": binlogdata_pb2.MigrationType.Name(j.migration_type), "tables": list(j.tables),
            # sorted: Vitess lists the target shards in Go map order (measured: 80-c0, c0-, -40, 40-80)
            "shard_gtids": sorted((g.keyspace, g.shard, bool(g.gtid), len(g.table_p_ks)) for g in j.shard_gtids),
            "participants": [(p.keyspace, p.shard) for p in j.participants], "local_position": bool(j.local_position),
            "source_workflows": len(j.source_workflows)}


def sim_journal(sources: list[str], targets: list[str]) -> binlogdata_pb2.Journal:
    """The test server's journal of the same split, as a VStream of its sources sees it."""
    with VTGateSim() as sim:
        sim.create_keyspace(KS, sources, ddl=[TABLE_DDL.format(t=TABLE)])
        watch = JournalWatch(sim.address, sources)
        sim.execute(f"insert into {TABLE} (id, name) values (1, 'a')", KS)
        sim.reshard(KS, targets)
        return watch.journal(timeout=30)


@pytest.fixture(scope="module")
def vt() -> Iterator[VitessCluster]:
    tables = [TABLE, RESTART_TABLE]
    with VitessCluster(KS, ["-80", "80-"], [TABLE_DDL.format(t=t) for t in tables], hash_vschema(tables)) as c:
        yield c


RETRY = {"retriable.restart.connector.wait.ms": "500", "shardcdc.retry.backoff.max.ms": "2000"}
# After the source serves again: VTGate's tablet picker waits 30 s between tries while a shard has no
# healthy tablet in its view (Vitess v24's discovery.tabletPickerRetryDelay, no flag: a restarted
# tablet, docs/fidelity.md; measured 28 s), then the worker's own reconnect backoff cap (2 s here,
# 60 s by default: a restarted VTGate, measured 1.8 s), plus slack for the new VStream, the record's
# way to Kafka and this test's consumer on 2 shared cores.
PICKER_RETRY = 30.0
STALL_LIMIT = PICKER_RETRY + 2.0 + 25.0


def _on_shard(shard_end: int, start: int) -> int:
    """The first id from ``start`` whose hash keyspace id is below ``shard_end`` (e.g. 0x80: -80)."""
    return next(i for i in range(start, start + 1000) if keyspace_id(i)[0] < shard_end)


def _stall(kafka_broker: KafkaBroker, writer: Writer, prefix: str, marker: int) -> float:
    """Seconds from a write (now that the source serves again) to its record in the topic, read by a
    consumer that follows the topic (``consume_all`` waits for an end that a busy topic may not show)."""
    topic = f"{prefix}.{KS}.{RESTART_TABLE}"
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"marker-{uuid.uuid4()}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        writer.client.execute(f"insert into {RESTART_TABLE} (id, name, qty) values ({marker}, 'marker', 0)", KS)
        began = time.monotonic()
        key = f'"id":{marker}}}'.encode()
        while time.monotonic() - began < STALL_LIMIT + 30:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and key in (msg.key() or b""):
                return time.monotonic() - began
        raise AssertionError(f"the marker {marker} not in {topic} after {STALL_LIMIT + 30:.0f}s")
    finally:
        consumer.close()


def test_a_tablet_and_vtgate_restarted_mid_stream_lose_nothing(
    vt: VitessCluster, kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    prefix, log = f"rs{uuid.uuid4().hex[:6]}", tmp_path / "worker.log"
    props = worker_props(kafka_broker, vt, prefix, RESTART_TABLE, keyspace=KS, **RETRY)
    client = vt.client()
    writer = Writer(client, RESTART_TABLE, seed=9, keyspace=KS)
    writer.insert(40)
    worker = Worker(write_properties(tmp_path / "worker.properties", props), log)
    stalls: dict[str, float] = {}
    try:
        wait_for(worker.streaming, timeout=180, what="the worker streaming", period=0.2)
        with workload(writer):
            wait_for(lambda: worker.sent() > 60, timeout=120, what="the workload streaming")
            vt.kill_tablet("-80")  # the primary vttablet and its mariadbd, SIGKILL
            vt.start_tablet("-80")
            stalls["tablet -80"] = _stall(kafka_broker, writer, prefix, _on_shard(0x80, 900_000))
            vt.restart_vtgate()
            stalls["vtgate"] = _stall(kafka_broker, writer, prefix, _on_shard(0x100, 910_000))
        worker.status()  # raises if the worker exited on the way
        writer.run(10)
        state = topic_equals_source(kafka_broker, client, prefix, RESTART_TABLE, keyspace=KS)
        keys = per_key_order_kept(records(kafka_broker, prefix, RESTART_TABLE, keyspace=KS))
    except (AssertionError, RuntimeError):
        print(log.read_text()[-4000:])
        raise
    finally:
        stop_group(worker.proc)
        client.close()
    print(f"stalls after the source served again: {stalls}")
    assert all(s <= STALL_LIMIT for s in stalls.values()), stalls
    assert state.duplicates == 0 and keys > 40


def test_split_2_to_4_then_merge_back_are_followed_by_local_mode(
    vt: VitessCluster, tmp_path: Path, kafka_broker: KafkaBroker
) -> None:
    prefix, state = f"rr{uuid.uuid4().hex[:6]}", tmp_path / "state"
    client = vt.client()
    writer = Writer(client, TABLE, seed=3, keyspace=KS)
    writer.insert(40)
    manifest = tmp_path / "connector.yaml"
    manifest.write_text(f"""\
apiVersion: shardcdc.io/v1alpha1
kind: CdcConnector
metadata:
  name: cust
spec:
  source:
    vitess:
      vtgate: "{vt.vtgate}"
      keyspace: {KS}
  kafka:
    bootstrapServers: "{kafka_broker.bootstrap}"
    topicPrefix: {prefix}
    offsetsTopic: {prefix}-offsets
  tasks: 2
  config:
    offset.storage.replication.factor: "1"
    offset.flush.interval.ms: "200"
""")
    run = Run(manifest, state, tmp_path / "run.log")
    try:
        ctl = wait_for(lambda: run.alive() or control(state, "cust"), STEP, "the control endpoint")
        wait_for(lambda: ready(ctl, 0, 2, 2), STEP, "generation 0 streaming 2 shards")
        for generation, (workflow, sources, targets) in enumerate(PLAN, start=1):
            watch = JournalWatch(vt.vtgate, sources) if generation == 1 else None
            with workload(writer):
                vt.add_shards(targets)
                reshard_create(vt, KS, workflow, sources, targets)
                switch_traffic(vt, KS, workflow)
                a = wait_for(lambda g=generation, t=targets: ready(ctl, g, 2, len(t)), STEP,
                             f"generation {generation} over {targets}")
                assert sorted(s for t in a["taskStates"] for s in t["shards"]) == sorted(targets)
                if watch is not None:  # the real Reshard's journal against the test server's
                    real = watch.journal()
                    test = sim_journal(sources, targets)
                    assert journal_structure(real) == journal_structure(test), (real, test)
                    # and the id, workflow.HashStreams over the targets' stream ids: measured equal
                    assert real.id == test.id, (real, test)
            writer.run(10)  # after the switch, on the new shards
            materialised = topic_equals_source(kafka_broker, client, prefix, TABLE, keyspace=KS, timeout=STEP)
            # The workflow ends: the source shards go; the operator's discovery sees the new ones.
            vt.vtctldclient("Reshard", "--workflow", workflow, "--target-keyspace", KS, "complete")
            found = discover_via_vtctld(vt.vtctld, KS)
            assert (found.serving, found.discovered) == (tuple(targets), tuple(targets))
            for shard in sources:  # their tablets would register the removed shards again
                vt.stop_tablet(shard)
            keys = per_key_order_kept(records(kafka_broker, prefix, TABLE, keyspace=KS))
    finally:
        run.stop()
        client.close()
    assert keys > 40
    assert "generation 1 started: 2 tasks over 4 shards" in run.output()
    assert "generation 2 started: 2 tasks over 2 shards" in run.output()
    assert materialised.applied > 40 and materialised.duplicates == 0
    # Generation 1's tasks held 2 of the merge's 4 source shards each: each read the first up to
    # its journal, then (VTGate ended the stream: not all participants in it) streamed the other
    # one alone up to its own journal before stopping (docs/operations.md, Resharding).
    for task in ("t0", "t1"):
        worker_log = next(state.rglob(f"cust-g1-{task}-*/container.log")).read_text()
        assert "reached it; streaming customer/" in worker_log, worker_log[-3000:]
