"""``Producer.send_rows_src`` writes the envelope tails in C (source block from its parts, commit
times, op, batch time): the record values must be the Python path's (``TablePlan.send_rows`` with
``_tails``) at the ends of what the tails hold, and a time the C tails cannot hold in 64 bits is
handed back to the Python path (the returned index is the start).

No broker: the producer points at a closed port and its records expire at once, so their values
come back in the failed delivery reports (``take_errors``), which is what is compared.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from events_fixtures import field, field_event, insert, update

from cdcworker.events import EncoderConfig, native
from cdcworker.events.encoder import OutRecord, TablePlan
from cdcworker.events.source import SourceContext
from cdcworker.nativesink import _kafka_error, librdkafka_path

FIELDS = [field("id", "INT64", "bigint", flags=3), field("name", "VARCHAR", "varchar(64)"), field("qty", "INT32", "int")]
VGTID = '[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/a:1-5","table_p_ks":[]}]'
ODD_VGTID = 'x"\\\n\u00e9\U0001f600\x7f'  # escapes of every kind in the source block's string body
ROWS = [insert(b"1", b"a", b"2").SerializeToString(),
        update((b"1", b"a", b"2"), (b"1", b"b", b"3")).SerializeToString()]

def python_values(plan: TablePlan, ctx: SourceContext, now_ns: int, op: str) -> list[bytes]:
    out: list[bytes] = []

    def fail(*args: Any) -> list[OutRecord]:
        raise AssertionError(args)

    frag = ctx.fragment(plan.version, plan.logical_name, plan.table, plan.unset_snapshot)
    plan.send_rows(ROWS, frag, now_ns, op, None, None, lambda t, k, v, h: out.append(v), fail, fail, None, None)
    return out


def native_values(plan: TablePlan, ctx: SourceContext, now_ns: int, op: str) -> tuple[int, list[bytes]]:
    producer = native.rowenc.Producer(
        librdkafka_path(), {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "1", "log_level": "0"}, _kafka_error)
    sent = plan.send_rows_native(producer, ROWS, ctx, now_ns, op)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < sent and time.monotonic() < deadline:
        producer.poll(0.1)  # waits for the expired records' reports
        got += [err[6] for err in producer.take_errors()]
    return sent, got


@pytest.mark.parametrize(("encoder", "commit_s", "now_ns", "op", "vgtid", "sent"), [
    ({}, 1_700_000_000, 1_750_000_000_123_456_789, "c", VGTID, 2),
    ({}, -5, 0, "c", VGTID, 2),
    ({}, -9_000_000_000, 999, "r", VGTID, 2),
    ({}, 9_000_000_000, 2**63 - 1, "c", VGTID, 2),
    ({"value_schemas_enable": False, "replace_null_with_default": False}, 7, 123_456_789, "c", ODD_VGTID, 2),
    ({}, 9_000_000_001, 5, "c", VGTID, 0),  # ts_ns past 64 bits: handed back
    ({}, 10**30, 5, "c", VGTID, 0),
    ({}, 0, -1, "c", VGTID, 0),  # a batch time before 1970: Python floors, C would truncate
    ({}, 0, 2**64, "c", VGTID, 0),
], ids=["now", "negative", "min", "max", "no-schema-odd-vgtid", "past-ns", "huge", "before-1970", "past-64-bits"])
def test_c_tails_are_the_python_tails(encoder: dict[str, Any], commit_s: int, now_ns: int, op: str, vgtid: str,
                                      sent: int) -> None:
    plan = TablePlan.compile(field_event("shop.items", FIELDS, "shop", "-80"), EncoderConfig("pfx", **encoder))
    assert plan.sends_natively
    ctx = SourceContext("shop", "-80", commit_s, vgtid)
    n, got = native_values(plan, ctx, now_ns, op)
    assert n == sent
    assert sorted(got) == sorted(python_values(plan, ctx, now_ns, op)[:sent])


def test_a_negative_start_is_refused_before_any_row() -> None:
    """A start index below 0 would read before the list's first item: both C loops refuse it."""
    plan = TablePlan.compile(field_event("shop.items", FIELDS, "shop", "-80"), EncoderConfig("pfx"))
    producer = native.rowenc.Producer(
        librdkafka_path(), {"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": "1", "log_level": "0"}, _kafka_error)
    parts = SourceContext("shop", "-80", 7, VGTID).source_parts(plan.version, plan.logical_name, plan.table, plan.unset_snapshot)
    tail = b"}"
    with pytest.raises(ValueError, match="start must be >= 0"):
        producer.send_rows_src(plan._native, plan.topic, list(ROWS), -1, b"{", None, parts, b"x", 7, "c", 5, tail)
    with pytest.raises(ValueError, match="start must be >= 0"):
        producer.send_rows(plan._native, plan.topic, list(ROWS), -1, b"{", tail, tail, None)
    assert producer.records_sent == 0
