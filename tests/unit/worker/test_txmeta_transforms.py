"""Native equivalents of UseLocalVgtid, RemoveField and FilterTransactionTopicRecords."""

from __future__ import annotations

import pytest

from cdcworker.events.schema import build_schemas
from cdcworker.offsets.vgtid import LastPK, PKField, PKRow, ShardGtid, TableLastPK, Vgtid
from cdcworker.txmeta.schemas import transaction_block_schema
from cdcworker.txmeta.transforms import (
    SizeReduction,
    block_exclusions,
    local_vgtid_json,
    remove_fields_payload,
    remove_fields_schema,
)

U1 = "027a0d3e-93a1-11ee-8d36-0242ac110002"


def test_local_vgtid_keeps_only_the_event_shard() -> None:
    full = Vgtid(
        (
            ShardGtid("ks", "-80", f"MySQL56/{U1}:1-114"),
            ShardGtid(
                "ks",
                "80-",
                "",
                (TableLastPK("t", LastPK((PKField("id", "INT64", 63, 49667),), (PKRow((2,), b"10"),))),),
            ),
        )
    ).to_json()
    assert local_vgtid_json(full, "-80") == (
        '[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/' + U1 + ':1-114","table_p_ks":[]}]'
    )
    assert local_vgtid_json(full, "80-") == (
        '[{"keyspace":"ks","shard":"80-","gtid":"","table_p_ks":[{"table_name":"t","lastpk":'
        '{"fields":[{"name":"id","type":"INT64","charset":63,"flags":49667}],'
        '"rows":[{"lengths":["2"],"values":"10"}]}}]}]'
    )
    with pytest.raises(ValueError, match="not in the VGTID"):
        local_vgtid_json(full, "c0-")


def test_size_reduction_flags() -> None:
    full = Vgtid.of("ks", [("-80", "MySQL56/a:1-2"), ("80-", "MySQL56/b:1-3")]).to_json()
    on = SizeReduction(True, frozenset({"transaction.id", "source.db", "transaction.x.y"}), True)
    assert on.transaction_block_exclusions == frozenset({"id"})
    assert (
        on.source_vgtid(full, "80-")
        == '[{"keyspace":"ks","shard":"80-","gtid":"MySQL56/b:1-3","table_p_ks":[]}]'
    )
    assert SizeReduction().source_vgtid(full, "80-") == full
    assert block_exclusions(["transaction.total_order", "id"]) == frozenset({"total_order"})


def test_remove_field_on_the_envelope_schema_matches_the_native_block() -> None:
    env = build_schemas("shop.ks.t", [], []).envelope
    reduced = remove_fields_schema(env, {"transaction.id"})
    expected_tx = transaction_block_schema(exclude={"id"})
    expected_tx["field"] = "transaction"
    tx_field = next(f for f in reduced["fields"] if f["field"] == "transaction")
    assert tx_field == expected_tx
    # Everything else is unchanged, key order included.
    others = [f for f in reduced["fields"] if f["field"] != "transaction"]
    assert others == [f for f in env["fields"] if f["field"] != "transaction"]
    assert list(reduced) == ["type", "fields", "optional", "name", "version"]


def test_remove_field_payload_and_struct_rules() -> None:
    schema = {
        "type": "struct",
        "fields": [
            {"type": "string", "optional": False, "field": "op"},
            {
                "type": "struct",
                "fields": [
                    {"type": "string", "optional": False, "field": "id"},
                    {"type": "int64", "optional": False, "field": "total_order"},
                ],
                "optional": True,
                "name": "event.block",
                "version": 1,
                "doc": "dropped by the rebuild",
                "field": "transaction",
            },
        ],
        "optional": False,
        "name": "x.Envelope",
        "version": 2,
    }
    # A struct path is never removed (only descended into); a leaf path is.
    out = remove_fields_schema(schema, {"transaction", "transaction.id"})
    assert out["fields"][1] == {
        "type": "struct",
        "fields": [{"type": "int64", "optional": False, "field": "total_order"}],
        "optional": True,
        "name": "event.block",
        "version": 1,
        "field": "transaction",
    }
    payload = {"op": "c", "transaction": {"id": "v", "total_order": 3}}
    assert remove_fields_payload(payload, schema, {"transaction.id", "op"}) == {
        "transaction": {"total_order": 3}
    }
    assert remove_fields_payload({"op": "c", "transaction": None}, schema, {"transaction.id"}) == {
        "op": "c",
        "transaction": None,
    }


def test_options_from_the_seed_configuration() -> None:
    from cdcworker.config import load_config
    from cdcworker.txmeta import TxMetaOptions

    props = {
        "name": "conn",
        "topic.prefix": "shop",
        "database.hostname": "localhost",
        "database.port": "15991",
        "vitess.keyspace": "ks",
        "bootstrap.servers": "localhost:9092",
        "provide.transaction.metadata": "true",
        "transaction.metadata.factory": (
            "io.debezium.connector.vitess.pipeline.txmetadata.VitessOrderedTransactionMetadataFactory"
        ),
        "transforms": "filterTransactionTopicRecords,removeField,useLocalVgtid",
        "transforms.filterTransactionTopicRecords.type": (
            "io.debezium.connector.vitess.transforms.FilterTransactionTopicRecords"
        ),
        "transforms.removeField.type": "io.debezium.connector.vitess.transforms.RemoveField",
        "transforms.removeField.field_names": "transaction.id",
        "transforms.useLocalVgtid.type": "io.debezium.connector.vitess.transforms.UseLocalVgtid",
        "vitess.connector.generation": "3",
        "vitess.inherit.epoch": "true",
    }
    cfg = load_config([], env={}, overrides=props)
    opts = TxMetaOptions.from_config(cfg)
    assert (opts.topic, opts.ordered, opts.emit_boundaries, opts.remove_fields) == (
        "shop.transaction",
        True,
        False,
        frozenset({"transaction.id"}),
    )
    assert (opts.connector_generation, opts.inherit_epoch, opts.decimal_numeric) == (3, True, False)
    red = SizeReduction.from_config(cfg)
    assert red == SizeReduction(True, frozenset({"transaction.id"}), True)
