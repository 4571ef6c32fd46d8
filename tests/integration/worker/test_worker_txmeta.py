"""Transaction metadata wired into the worker: real broker, VTGate test server, exact records.

BEGIN/END on ``<prefix>.transaction``, the ``transaction`` block on every data event, the offset
fields stored with each commit point, restarts (clean and from an offset Debezium stored in the
middle of a transaction), the ordered factory's epoch/rank and the consumer ordering rule across
a reparent and a reshard, and the three size-reducing SMTs.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from test_txmeta_monitor import KEY_SCHEMA, VALUE_SCHEMA
from worker_fixtures import (
    CUSTOMER_DDL,
    caught_up,
    running_task,
    wait_for,
    wait_positioned,
    worker_config,
)

from cdcworker.config import WorkerConfig
from cdcworker.offsets import OffsetPartition, OffsetValue, Vgtid, offset_record_key
from cdcworker.offsets.store import OffsetStore
from cdcworker.txmeta import rank_json
from localkafka import ConsumedRecord, KafkaBroker, consume_all
from vtgatesim import VTGateSim

ORDERED = "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory"
# ids 1 2 3 5 9 10 13 hash to -80, 4 6 7 8 11 12 to 80- (hash vindex on id)


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER_DDL])
        yield s


def payload(r: ConsumedRecord) -> dict[str, Any]:
    assert r.value is not None
    return json.loads(r.value)["payload"]  # type: ignore[no-any-return]


def tx_topic(cfg: WorkerConfig) -> str:
    return f"{cfg.topic_prefix}.transaction"


def data_topic(cfg: WorkerConfig) -> str:
    return f"{cfg.topic_prefix}.commerce.customer"


def stored_offsets(broker: KafkaBroker, cfg: WorkerConfig) -> list[OffsetValue]:
    key = offset_record_key(cfg.name, OffsetPartition(cfg.topic_prefix))
    return [OffsetValue.from_bytes(r.value or b"") for r in consume_all(broker.bootstrap, cfg.kafka.offsets_topic) if r.key == key]


def esc(text: str) -> str:
    return json.dumps(text)[1:-1]


# ---------------------------------------------------------------------------------------------
def test_begin_end_and_transaction_blocks_are_exact(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"provide.transaction.metadata": "true"})
    sim.execute("INSERT INTO customer (id, email) VALUES (1, 'a@x.io')", "commerce")  # before the stream
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        # one transaction on -80 with three data events (insert, update, delete + tombstone)
        sim.execute_transaction(
            [
                "INSERT INTO customer (id, email) VALUES (2, 'b@x.io')",
                "UPDATE customer SET email = 'a@y.io' WHERE id = 1",
                "DELETE FROM customer WHERE id = 2",
            ],
            "commerce",
        )
        sim.execute("INSERT INTO customer (id, email) VALUES (4, 'd@x.io')", "commerce")  # 80-
        wait_for(lambda: caught_up(sim, run), what="all delivered")
        assert run.stop().exit_code == 0

    tx = consume_all(kafka_broker.bootstrap, tx_topic(cfg))
    data = consume_all(kafka_broker.bootstrap, data_topic(cfg))
    events = [r for r in data if r.value is not None]
    # the three-statement transaction on -80 and the 80- insert (the first insert precedes the stream)
    ids = {payload(r)["source"]["vgtid"] for r in events}
    txn_ids = [payload(r)["id"] for r in tx if payload(r)["status"] == "BEGIN"]
    assert [payload(r)["status"] for r in tx] == ["BEGIN", "END"] * len(txn_ids)
    assert set(txn_ids) >= ids  # every data event belongs to a transaction that has BEGIN/END

    big = [r for r in events if payload(r)["source"]["shard"] == "-80" and payload(r)["op"] in "ud"]
    txid = payload(big[0])["source"]["vgtid"]
    ts_ms = payload(big[0])["source"]["ts_ms"]
    in_txn = [r for r in events if payload(r)["source"]["vgtid"] == txid]
    assert [payload(r)["op"] for r in in_txn] == ["c", "u", "d"]
    blocks = [payload(r)["transaction"] for r in in_txn]
    assert blocks == [
        {"id": txid, "total_order": n, "data_collection_order": n} for n in (1, 2, 3)
    ]
    # the bytes of the block: Debezium's event.block field order, no extra fields
    assert in_txn[0].value is not None
    assert (
        b',"transaction":{"id":"' + esc(txid).encode() + b'","total_order":1,"data_collection_order":1},"op":"c"'
        in in_txn[0].value
    )
    # the envelope schema names the plain block
    schema = json.loads(in_txn[0].value)["schema"]
    block_schema = next(f for f in schema["fields"] if f["field"] == "transaction")
    assert [f["field"] for f in block_schema["fields"]] == ["id", "total_order", "data_collection_order"]

    # BEGIN and END of that transaction, byte for byte
    pos = [i for i, r in enumerate(tx) if payload(r)["id"] == txid]
    begin, end = tx[pos[0]], tx[pos[1]]
    key = ('{"schema":' + KEY_SCHEMA + ',"payload":{"id":"' + esc(txid) + '"}}').encode()
    assert begin.key == end.key == key
    assert begin.value == (
        '{"schema":' + VALUE_SCHEMA + ',"payload":{"status":"BEGIN","id":"' + esc(txid) + '",'
        '"event_count":null,"data_collections":null,"ts_ms":' + str(ts_ms) + "}}"
    ).encode()
    assert end.value == (
        '{"schema":' + VALUE_SCHEMA + ',"payload":{"status":"END","id":"' + esc(txid) + '",'
        '"event_count":3,"data_collections":[{"data_collection":"-80.commerce.customer","event_count":3}],'
        '"ts_ms":' + str(ts_ms) + "}}"
    ).encode()

    # the 80- transaction: its own id, numbering from 1
    other = [r for r in events if payload(r)["source"]["shard"] == "80-"]
    assert [payload(r)["transaction"] for r in other] == [
        {"id": payload(other[0])["source"]["vgtid"], "total_order": 1, "data_collection_order": 1}
    ]
    ends = {payload(r)["id"]: payload(r) for r in tx if payload(r)["status"] == "END"}
    assert ends[payload(other[0])["source"]["vgtid"]]["data_collections"] == [
        {"data_collection": "80-.commerce.customer", "event_count": 1}
    ]

    # the offset stored at the end names the last transaction streamed and its counters, as Debezium's
    # END offset. VTGate interleaves the shards' streams, so the 80- insert may arrive before the -80
    # transaction committed earlier: the last END on the transaction topic is the reference.
    last = stored_offsets(kafka_broker, cfg)[-1]
    last_end = payload([r for r in tx if payload(r)["status"] == "END"][-1])
    assert {sg.shard: sg.gtid for sg in last.vgtid} == sim.positions("commerce")
    assert last.transaction_id == last_end["id"]
    assert last.collection_counts == {c["data_collection"]: c["event_count"] for c in last_end["data_collections"]}
    assert last_end["id"] in (txid, payload(other[0])["source"]["vgtid"])


def test_restart_continues_without_duplicate_begin(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"provide.transaction.metadata": "true"})
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        for i in (1, 2, 3):
            sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
        wait_for(lambda: caught_up(sim, run), what="first batch")
        run.stop()
    for i in (5, 9):
        sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
    with running_task(cfg) as run:
        wait_for(lambda: caught_up(sim, run), what="second batch")
        run.stop()
    tx = [payload(r) for r in consume_all(kafka_broker.bootstrap, tx_topic(cfg))]
    begins = [p["id"] for p in tx if p["status"] == "BEGIN"]
    assert len(begins) == len(set(begins)) == 5
    assert [p["status"] for p in tx] == ["BEGIN", "END"] * 5
    assert [p["event_count"] for p in tx if p["status"] == "END"] == [1] * 5
    data = [payload(r) for r in consume_all(kafka_broker.bootstrap, data_topic(cfg))]
    assert [p["after"]["id"] for p in data] == [1, 2, 3, 5, 9]
    assert [p["transaction"]["id"] for p in data] == begins


def test_resume_from_an_offset_stored_mid_transaction(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    """Debezium stored the offset after the first of three events: no BEGIN, the rest continue 2, 3."""
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"provide.transaction.metadata": "true"})
    before = Vgtid.of("commerce", sim.positions("commerce"))
    sim.execute_transaction(
        [f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')" for i in (1, 2, 3)], "commerce"
    )
    txid = Vgtid.of("commerce", sim.positions("commerce")).to_json()
    dc = "-80.commerce.customer"
    with OffsetStore(cfg.kafka.client_config("producer"), cfg.kafka.offsets_topic, partitions=1, replication_factor=1) as store:
        store.ensure_topic()
        store.write(cfg.name, OffsetPartition(cfg.topic_prefix), OffsetValue.build(before, txid, {dc: 1}))
    with running_task(cfg) as run:
        wait_for(lambda: caught_up(sim, run), what="replayed transaction")
        run.stop()
    tx = [payload(r) for r in consume_all(kafka_broker.bootstrap, tx_topic(cfg))]
    assert [(p["status"], p["id"], p["event_count"]) for p in tx] == [("END", txid, 3)]
    data = [payload(r) for r in consume_all(kafka_broker.bootstrap, data_topic(cfg))]
    assert [p["after"]["id"] for p in data] == [2, 3]
    assert [p["transaction"] for p in data] == [
        {"id": txid, "total_order": n, "data_collection_order": n} for n in (2, 3)
    ]


def test_ordered_metadata_orders_events_across_reparent_and_reshard(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    """The seed's consumer rule: of two events for the same key, the greater (epoch, rank,
    total_order) is the newer one; also across a reparent and a split with inherited epochs."""
    cfg = worker_config(
        kafka_broker,
        sim.address,
        "commerce",
        extra={
            "provide.transaction.metadata": "true",
            "transaction.metadata.factory": ORDERED,
            "vitess.inherit.epoch": "true",
        },
    )
    with running_task(cfg) as run:
        # "current" is resolved per shard when the stream starts: write only once the worker holds
        # real positions, or the first inserts may precede them (and are, rightly, not streamed).
        wait_for(lambda: caught_up(sim, run), what="stream positioned at the current GTIDs")
        for i in (1, 4):
            sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'v0')", "commerce")
        for n in range(1, 3):
            sim.execute(f"UPDATE customer SET email = 'v{n}' WHERE id IN (1, 4)", "commerce")
        wait_for(lambda: caught_up(sim, run), what="before reparent")
        sim.reparent("commerce", "-80")
        for n in range(3, 5):
            sim.execute(f"UPDATE customer SET email = 'v{n}' WHERE id IN (1, 4)", "commerce")
        wait_for(lambda: caught_up(sim, run), what="after reparent")
        sim.reshard("commerce", ["-40", "40-80", "80-c0", "c0-"])
        for n in range(5, 7):
            sim.execute(f"UPDATE customer SET email = 'v{n}' WHERE id IN (1, 4)", "commerce")
        wait_for(lambda: caught_up(sim, run), what="after reshard")
        run.stop()

    records = [r for r in consume_all(kafka_broker.bootstrap, data_topic(cfg)) if r.value is not None]
    by_key: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        p = payload(r)
        by_key.setdefault(p["after"]["id"], []).append(p)
    assert sorted(by_key) == [1, 4]
    for key, events in by_key.items():
        assert [e["after"]["email"] for e in events] == [f"v{n}" for n in range(7)], key
        order = [
            (e["transaction"]["transaction_epoch"], int.from_bytes(_b64(e["transaction"]["transaction_rank"]), "big"),
             e["transaction"]["total_order"])
            for e in events
        ]
        for older, newer in itertools.pairwise(order):
            assert newer > older, (key, order)
        # the rank is the sum of the transaction shard's sequence numbers, as Debezium computes it
        for e in events:
            shard_gtid = next(g["gtid"] for g in json.loads(e["source"]["vgtid"]) if g["shard"] == e["source"]["shard"])
            assert e["transaction"]["transaction_rank"] == rank_json(shard_gtid)
        epochs = [o[0] for o in order]
        # started from "current" with no shard list: Debezium's start VGTID names shard "", which its
        # ShardLineage reads as the whole key range, so every real shard inherits it: 0 + 1 = 1 (the
        # real connector's bytes, conformance pair names2); the reparent keeps the old uuid (a
        # superset): 1; the split targets inherit the source shard's epoch + 1: 2
        assert epochs == [1, 1, 1, 1, 1, 2, 2], (key, epochs)
    # the epoch map and generation are stored with the offsets, Debezium's field names and format
    last = stored_offsets(kafka_broker, cfg)[-1]
    assert json.loads(last.fields["transaction_epoch"]) == {"-40": 2, "40-80": 2, "80-c0": 2, "c0-": 2}
    assert last.fields["connector_generation"] == 0


def _b64(text: str) -> bytes:
    import base64

    return base64.b64decode(text)


def test_size_reducing_transforms(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    """FilterTransactionTopicRecords, RemoveField transaction.id and UseLocalVgtid, configured as
    Debezium's transforms."""
    cfg = worker_config(
        kafka_broker,
        sim.address,
        "commerce",
        extra={
            "provide.transaction.metadata": "true",
            "transforms": "filter,remove,local",
            "transforms.filter.type": "io.debezium.connector.vitess.transforms.FilterTransactionTopicRecords",
            "transforms.remove.type": "io.debezium.connector.vitess.transforms.RemoveField",
            "transforms.remove.field_names": "transaction.id",
            "transforms.local.type": "io.debezium.connector.vitess.transforms.UseLocalVgtid",
        },
    )
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute("INSERT INTO customer (id, email) VALUES (1, 'a@x.io'), (4, 'd@x.io')", "commerce")
        wait_for(lambda: caught_up(sim, run), what="delivered")
        run.stop()
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": kafka_broker.bootstrap}).list_topics(timeout=10).topics
    assert tx_topic(cfg) not in topics  # no BEGIN/END records at all
    records = consume_all(kafka_broker.bootstrap, data_topic(cfg))
    positions = sim.positions("commerce")
    for r in records:
        assert r.value is not None
        doc = json.loads(r.value)
        p = doc["payload"]
        assert p["transaction"] == {"total_order": 1, "data_collection_order": 1}
        shard = p["source"]["shard"]
        assert p["source"]["vgtid"] == (
            '[{"keyspace":"commerce","shard":"' + shard + '","gtid":"' + positions[shard] + '","table_p_ks":[]}]'
        )
        block = next(f for f in doc["schema"]["fields"] if f["field"] == "transaction")
        assert block == {
            "type": "struct",
            "fields": [
                {"type": "int64", "optional": False, "field": "total_order"},
                {"type": "int64", "optional": False, "field": "data_collection_order"},
            ],
            "optional": True,
            "name": "event.block",
            "version": 1,
            "field": "transaction",
        }
    assert sorted(payload(r)["source"]["shard"] for r in records) == ["-80", "80-"]


def test_transforms_outside_the_three_are_rejected_at_validation() -> None:
    from cdcworker.config import load_config

    base = {
        "name": "n", "topic.prefix": "p", "database.hostname": "h", "vitess.keyspace": "k", "bootstrap.servers": "b:1",
        "transforms": "r,x",
        "transforms.r.type": "io.debezium.connector.vitess.transforms.RemoveField",
        "transforms.r.field_names": "transaction.id,source.ts_ns",
        "transforms.x.type": "org.apache.kafka.connect.transforms.InsertField$Value",
    }
    with pytest.raises(Exception) as err:
        load_config([], env={}, overrides=base)
    text = str(err.value)
    assert "transforms.r.field_names: source.ts_ns: shardcdc's RemoveField removes only transaction." in text
    assert "transforms.x.type: 'org.apache.kafka.connect.transforms.InsertField$Value' is not supported" in text
    good = {k: v for k, v in base.items() if not k.startswith("transforms.x")}
    good.update({"transforms": "r", "transforms.r.field_names": "transaction.id"})
    ok = load_config([], env={}, overrides=good)
    assert ok.transforms.remove_fields == ("transaction.id",)
