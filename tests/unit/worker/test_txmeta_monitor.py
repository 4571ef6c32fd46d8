"""TransactionMonitor: BEGIN/END records, the transaction block, offsets, restarts, SMT flags,
and the seed's consumer ordering rule across a reparent and a reshard."""

from __future__ import annotations

import itertools
from typing import Any

import orjson
import pytest

from cdcworker.events.encoder import OutRecord
from cdcworker.offsets.value import OffsetValue
from cdcworker.offsets.vgtid import Vgtid
from cdcworker.txmeta import (
    TransactionMonitor,
    TxMetaOptions,
    data_collection_id,
    transaction_block_payload,
    transaction_block_schema,
)

U1 = "027a0d3e-93a1-11ee-8d36-0242ac110002"
U2 = "1e7ab2c6-93a1-11ee-8b58-0242ac110003"
U3 = "3d4e5f60-93a1-11ee-8b58-0242ac110004"
TOPIC = "shop.transaction"

TX1 = Vgtid.of("ks", [("0", f"MySQL56/{U1}:1-37")]).to_json()
TX1_ESC = TX1.replace('"', '\\"')

KEY_SCHEMA = (
    '{"type":"struct","fields":[{"type":"string","optional":false,"field":"id"}],"optional":false,'
    '"name":"io.debezium.connector.common.TransactionMetadataKey","version":1}'
)
VALUE_SCHEMA = (
    '{"type":"struct","fields":['
    '{"type":"string","optional":false,"field":"status"},'
    '{"type":"string","optional":false,"field":"id"},'
    '{"type":"int64","optional":true,"field":"event_count"},'
    '{"type":"array","items":{"type":"struct","fields":['
    '{"type":"string","optional":false,"field":"data_collection"},'
    '{"type":"int64","optional":false,"field":"event_count"}],'
    '"optional":true,"name":"event.collection","version":1},"optional":true,"field":"data_collections"},'
    '{"type":"int64","optional":false,"field":"ts_ms"}],'
    '"optional":false,"name":"io.debezium.connector.common.TransactionMetadataValue","version":1}'
)


def frag(f: orjson.Fragment | None) -> bytes:
    assert f is not None
    return orjson.dumps([f])[1:-1]


def test_begin_and_end_records_with_schemas() -> None:
    mon = TransactionMonitor(TxMetaOptions(TOPIC))
    begin = mon.begin(TX1, 1486500577000, "0")
    assert begin is not None
    assert begin == OutRecord(
        TOPIC,
        ('{"schema":' + KEY_SCHEMA + ',"payload":{"id":"' + TX1_ESC + '"}}').encode(),
        (
            '{"schema":' + VALUE_SCHEMA + ',"payload":{"status":"BEGIN","id":"' + TX1_ESC + '",'
            '"event_count":null,"data_collections":null,"ts_ms":1486500577000}}'
        ).encode(),
        [],
    )
    dc = data_collection_id("0", "ks", "my_seq")
    assert dc == "0.ks.my_seq"
    assert (
        frag(mon.on_event(dc))
        == b'{"id":"' + TX1_ESC.encode() + b'","total_order":1,"data_collection_order":1}'
    )
    end = mon.end(1486500578000)
    assert end.record is not None
    assert (
        end.record.value
        == (
            '{"schema":' + VALUE_SCHEMA + ',"payload":{"status":"END","id":"' + TX1_ESC + '",'
            '"event_count":1,"data_collections":[{"data_collection":"0.ks.my_seq","event_count":1}],'
            '"ts_ms":1486500578000}}'
        ).encode()
    )
    assert end.record.key == begin.key
    # The END record's offset still carries the transaction (as Debezium's does).
    off = end.offset.to_offset(Vgtid.from_json(TX1))
    assert orjson.loads(off.to_bytes()) == {
        "vgtid": TX1,
        "transaction_id": TX1,
        "transaction_data_collection_order_0.ks.my_seq": 1,
    }
    assert off == OffsetValue.build(Vgtid.from_json(TX1), TX1, {"0.ks.my_seq": 1})
    assert not mon.in_progress
    assert mon.offset_fields().transaction_id is None
    assert dict(mon.offset_fields().collection_counts) == {}


def test_records_without_schemas_and_counters() -> None:
    mon = TransactionMonitor(TxMetaOptions(TOPIC, key_schemas_enable=False, value_schemas_enable=False))
    rec = mon.begin(TX1, 1000, "0")
    assert rec is not None
    assert rec.key == b'{"id":"' + TX1_ESC.encode() + b'"}'
    assert (
        rec.value
        == b'{"status":"BEGIN","id":"'
        + TX1_ESC.encode()
        + b'","event_count":null,"data_collections":null,"ts_ms":1000}'
    )
    a, b = "0.ks.a", "0.ks.b"
    orders = []
    for dc in (a, b, a, a, b):
        block = orjson.loads(frag(mon.on_event(dc)))
        orders.append((block["total_order"], block["data_collection_order"]))
    assert orders == [(1, 1), (2, 1), (3, 2), (4, 3), (5, 2)]
    fields = mon.offset_fields()
    assert fields.transaction_id == TX1
    assert dict(fields.collection_counts) == {a: 3, b: 2}
    end = mon.end(2000)
    assert end.record is not None
    assert orjson.loads(end.record.value or b"null") == {
        "status": "END",
        "id": TX1,
        "event_count": 5,
        # Java HashMap order: "0.ks.b" hashes to bucket 9, "0.ks.a" to bucket 10.
        "data_collections": [
            {"data_collection": b, "event_count": 2},
            {"data_collection": a, "event_count": 3},
        ],
        "ts_ms": 2000,
    }


def test_empty_transaction_end() -> None:
    mon = TransactionMonitor(TxMetaOptions(TOPIC, key_schemas_enable=False, value_schemas_enable=False))
    mon.begin(TX1, 1000, "0")
    end = mon.end(1000)
    assert end.record is not None
    assert (end.record.value or b"").endswith(b'"event_count":0,"data_collections":[],"ts_ms":1000}')


def test_data_collections_follow_java_hashmap_order() -> None:
    # "-80.ks.b" and "-80.ks.a" land in HashMap buckets in a different order than inserted.
    mon = TransactionMonitor(TxMetaOptions(TOPIC, key_schemas_enable=False, value_schemas_enable=False))
    mon.begin(TX1, 1, "0")
    names = ["-80.ks.zeta", "-80.ks.alpha", "80-.ks.mid", "-80.ks.beta"]
    for n in names:
        mon.on_event(n)
    end = mon.end(2)
    assert end.record is not None
    listed = [d["data_collection"] for d in orjson.loads(end.record.value or b"null")["data_collections"]]

    # Java: new HashMap<String,Long>() iteration = by (hash ^ hash>>>16) & 15, then insertion.
    def bucket(s: str) -> int:
        h = 0
        for ch in s:
            h = (31 * h + ord(ch)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & 15

    assert listed == sorted(names, key=lambda s: (bucket(s), names.index(s)))


def test_filter_transaction_topic_records_and_remove_id() -> None:
    opts = TxMetaOptions(TOPIC, emit_boundaries=False, remove_fields=frozenset({"transaction.id"}))
    mon = TransactionMonitor(opts)
    assert mon.begin(TX1, 1000, "0") is None
    assert frag(mon.on_event("0.ks.t")) == b'{"total_order":1,"data_collection_order":1}'
    end = mon.end(1001)
    assert end.record is None
    assert end.offset.transaction_id == TX1  # offsets are unaffected by the SMT
    assert transaction_block_schema(exclude={"id"}) == {
        "type": "struct",
        "fields": [
            {"type": "int64", "optional": False, "field": "total_order"},
            {"type": "int64", "optional": False, "field": "data_collection_order"},
        ],
        "optional": True,
        "name": "event.block",
        "version": 1,
    }


def test_block_payload_helper_matches_fragment() -> None:
    assert transaction_block_payload("x", 3, 2) == {"id": "x", "total_order": 3, "data_collection_order": 2}
    assert transaction_block_payload("x", 3, 2, epoch=1, rank_value="Bek=", exclude={"id"}) == {
        "total_order": 3,
        "data_collection_order": 2,
        "transaction_epoch": 1,
        "transaction_rank": "Bek=",
    }


def test_event_outside_transaction_is_an_error() -> None:
    mon = TransactionMonitor(TxMetaOptions(TOPIC))
    with pytest.raises(ValueError, match="outside a transaction"):
        mon.on_event("0.ks.t")


# --- ordered ----------------------------------------------------------------------------------


def vgtid(*pairs: tuple[str, str]) -> str:
    return Vgtid.of("ks", list(pairs)).to_json()


def test_ordered_block_schema_and_values() -> None:
    assert transaction_block_schema(ordered=True)["fields"][3:] == [
        {"type": "int64", "optional": False, "field": "transaction_epoch"},
        {
            "type": "bytes",
            "optional": False,
            "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1,
            "parameters": {"scale": "0"},
            "field": "transaction_rank",
        },
    ]
    start = vgtid(("-80", "current"), ("80-", "current"))
    mon = TransactionMonitor(TxMetaOptions(TOPIC, ordered=True), start_vgtid=start)
    tx = vgtid(("-80", f"MySQL56/{U1}:1-1513"), ("80-", "current"))
    mon.begin(tx, 1, "-80")
    tx_esc = tx.replace('"', '\\"').encode()
    assert frag(mon.on_event("-80.ks.t")) == (
        b'{"id":"'
        + tx_esc
        + b'","total_order":1,"data_collection_order":1,"transaction_epoch":1,"transaction_rank":"Bek="}'
    )
    fields = mon.offset_fields()
    assert fields.extra == (("transaction_epoch", '{"-80":1,"80-":0}'), ("connector_generation", 0))
    # NUMERIC decimal format writes the rank as a number; RemoveField can drop any block field.
    mon2 = TransactionMonitor(
        TxMetaOptions(TOPIC, ordered=True, decimal_numeric=True, remove_fields=frozenset({"transaction.id"})),
        start_vgtid=start,
    )
    mon2.begin(tx, 1, "-80")
    assert frag(mon2.on_event("-80.ks.t")) == (
        b'{"total_order":1,"data_collection_order":1,"transaction_epoch":1,"transaction_rank":1513}'
    )


def test_ordered_offset_bytes_round_trip() -> None:
    start = vgtid(("-80", f"MySQL56/{U1}:1-4"))
    mon = TransactionMonitor(TxMetaOptions(TOPIC, ordered=True, connector_generation=2), start_vgtid=start)
    tx = vgtid(("-80", f"MySQL56/{U1}:1-5"))
    mon.begin(tx, 1, "-80")
    mon.on_event("-80.ks.t")
    off = mon.offset_fields().to_offset(Vgtid.from_json(start))
    parsed = orjson.loads(off.to_bytes())
    assert parsed == {
        "vgtid": start,
        "transaction_id": tx,
        "transaction_data_collection_order_-80.ks.t": 1,
        "transaction_epoch": '{"-80":0}',
        "connector_generation": 2,
    }
    assert off == OffsetValue.build(
        Vgtid.from_json(start),
        tx,
        {"-80.ks.t": 1},
        [("transaction_epoch", '{"-80":0}'), ("connector_generation", 2)],
    )


# --- restart ------------------------------------------------------------------------------------


def test_restart_inside_a_transaction_does_not_repeat_begin_and_continues_counters() -> None:
    opts = TxMetaOptions(TOPIC, key_schemas_enable=False, value_schemas_enable=False)
    first = TransactionMonitor(opts)
    first.begin(TX1, 1000, "0")
    delivered = [frag(first.on_event(dc)) for dc in ("0.ks.a", "0.ks.b", "0.ks.a")]
    stored = first.offset_fields().to_offset(Vgtid.of("ks", [("0", f"MySQL56/{U1}:1-36")]))

    # The stream replays the transaction from its BEGIN (the offset's vgtid is the previous one).
    again = TransactionMonitor(opts, restored=OffsetValue.from_bytes(stored.to_bytes()).fields)
    assert again.begin(TX1, 1000, "0") is None
    assert again.replay_pending == 3
    replay = [again.on_event(dc) for dc in ("0.ks.a", "0.ks.b", "0.ks.a", "0.ks.b", "0.ks.a")]
    assert replay[:3] == [None, None, None]  # already delivered: the loop drops them
    assert [orjson.loads(frag(f)) for f in replay[3:]] == [
        {"id": TX1, "total_order": 4, "data_collection_order": 2},
        {"id": TX1, "total_order": 5, "data_collection_order": 3},
    ]
    assert [orjson.loads(d)["total_order"] for d in delivered] == [1, 2, 3]
    end = again.end(1001)
    assert end.record is not None
    assert orjson.loads(end.record.value or b"null")["event_count"] == 5
    # The next transaction is a normal one.
    tx2 = Vgtid.of("ks", [("0", f"MySQL56/{U1}:1-38")]).to_json()
    assert again.begin(tx2, 1002, "0") is not None
    assert orjson.loads(frag(again.on_event("0.ks.a")))["total_order"] == 1


def test_restart_with_a_different_transaction_emits_begin() -> None:
    opts = TxMetaOptions(TOPIC, key_schemas_enable=False, value_schemas_enable=False)
    restored: dict[str, Any] = {
        "vgtid": TX1,
        "transaction_id": TX1,
        "transaction_data_collection_order_0.ks.a": 4,
    }
    mon = TransactionMonitor(opts, restored=restored)
    tx2 = Vgtid.of("ks", [("0", f"MySQL56/{U1}:1-38")]).to_json()
    assert mon.begin(tx2, 5, "0") is not None
    assert orjson.loads(frag(mon.on_event("0.ks.a")))["total_order"] == 1


# --- the seed's consumer rule ---------------------------------------------------------------------


def newer(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The seed document's rule: higher epoch, else higher rank, else higher total_order."""
    if a["transaction_epoch"] != b["transaction_epoch"]:
        return a if a["transaction_epoch"] > b["transaction_epoch"] else b
    if a["transaction_rank"] != b["transaction_rank"]:
        return a if a["transaction_rank"] > b["transaction_rank"] else b
    return a if a["total_order"] > b["total_order"] else b


def run_history(inherit: bool) -> list[dict[str, Any]]:
    """Events for one key, in commit order, through a reparent and a split of -80."""
    start = vgtid(("-80", "current"), ("80-", "current"))
    mon = TransactionMonitor(
        TxMetaOptions(TOPIC, ordered=True, decimal_numeric=True, inherit_epoch=inherit), start_vgtid=start
    )
    other = f"MySQL56/{U3}:1-50"
    history = [
        # (shard of the transaction, its VGTID, how many events for our key, events for other keys)
        ("-80", vgtid(("-80", f"MySQL56/{U1}:1-5"), ("80-", other)), 2, 1),
        ("80-", vgtid(("-80", f"MySQL56/{U1}:1-5"), ("80-", f"MySQL56/{U3}:1-51")), 0, 3),
        ("-80", vgtid(("-80", f"MySQL56/{U1}:1-6"), ("80-", f"MySQL56/{U3}:1-51")), 1, 0),
        # planned reparent: the new primary keeps the old history (superset): same epoch
        ("-80", vgtid(("-80", f"MySQL56/{U1}:1-6,{U2}:1-1"), ("80-", f"MySQL56/{U3}:1-51")), 1, 2),
        # failover to a restored replica with a new uuid only: rank drops, epoch must rise
        ("-80", vgtid(("-80", f"MySQL56/{U2}:1-2"), ("80-", f"MySQL56/{U3}:1-51")), 3, 0),
        # reshard: -80 splits; our key now lives in 40-80, whose GTIDs restart low
        (
            "40-80",
            vgtid(
                ("-40", f"MySQL56/{U1}:1-1"), ("40-80", f"MySQL56/{U2}:1-1"), ("80-", f"MySQL56/{U3}:1-51")
            ),
            1,
            1,
        ),
        (
            "40-80",
            vgtid(
                ("-40", f"MySQL56/{U1}:1-1"), ("40-80", f"MySQL56/{U2}:1-2"), ("80-", f"MySQL56/{U3}:1-51")
            ),
            2,
            0,
        ),
    ]
    events = []
    for shard, tx, ours, others in history:
        mon.begin(tx, 0, shard)
        for i in range(ours + others):
            block = orjson.loads(frag(mon.on_event(f"{shard}.ks.{'t' if i < ours else 'u'}")))
            if i < ours:
                events.append(block)
        mon.end(0)
    return events


def test_consumer_rule_picks_the_newer_event_across_reparent_and_reshard() -> None:
    events = run_history(inherit=True)
    assert [(e["transaction_epoch"], e["transaction_rank"], e["total_order"]) for e in events] == [
        (1, 5, 1),
        (1, 5, 2),
        (1, 6, 1),
        (1, 7, 1),
        (2, 2, 1),
        (2, 2, 2),
        (2, 2, 3),
        (3, 1, 1),
        (3, 2, 1),
        (3, 2, 2),
    ]
    for i, j in itertools.combinations(range(len(events)), 2):
        assert newer(events[i], events[j]) is events[j]
        assert newer(events[j], events[i]) is events[j]


def test_without_inherit_a_reshard_breaks_the_rule() -> None:
    # New shards start at epoch 0, so the rule alone cannot order events across the split:
    # this is why vitess.inherit.epoch exists.
    events = run_history(inherit=False)
    assert events[7]["transaction_epoch"] == 0
    assert newer(events[6], events[7]) is events[6]
