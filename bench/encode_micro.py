"""Encoder-only micro benchmark: rows/s for a 10-column table (JSON with schemas).

    .venv/bin/python bench/encode_micro.py [--rows N] [--runs R] [--no-schemas]

Decoding of the VStream response is excluded; the RowChange messages are built up
front, so the number is the cost of TablePlan.encode_change (slice, convert, key, value).
It prints wall-clock rows/s and process CPU time per row (the stable figure on a shared
machine), median of ``--runs``. ``SHARDCDC_NATIVE=0`` measures the pure-Python encoder;
``valgrind --tool=callgrind`` on ``--rows 20000 --runs 1`` gives a load-independent count.
"""

from __future__ import annotations

import argparse
import statistics
import time

from cdcworker.events import EncoderConfig, SourceContext, TablePlan, native
from cdcworker.events.encoder import context_headers
from vitessapi import binlogdata_pb2, query_pb2

NOT_NULL, PRI_KEY = 1, 2


def _field(name: str, type_name: str, column_type: str, flags: int = 0, decimals: int = 0) -> query_pb2.Field:
    return query_pb2.Field(
        name=name, type=query_pb2.Type.Value(type_name), column_type=column_type, flags=flags, decimals=decimals
    )


FIELDS = [
    _field("id", "INT64", "bigint", NOT_NULL | PRI_KEY),
    _field("customer_id", "INT32", "int", NOT_NULL),
    _field("status", "VARCHAR", "varchar(16)", NOT_NULL),
    _field("amount", "DECIMAL", "decimal(12,2)"),
    _field("qty", "INT16", "smallint"),
    _field("price", "FLOAT64", "double"),
    _field("note", "VARCHAR", "varchar(255)"),
    _field("created_at", "DATETIME", "datetime(6)", NOT_NULL, 6),
    _field("updated_at", "TIMESTAMP", "timestamp"),
    _field("flags", "INT8", "tinyint"),
]


def make_rows(n: int) -> list[binlogdata_pb2.RowChange]:
    out = []
    for i in range(n):
        vals = [
            str(i + 1).encode(),
            str(1000 + i % 977).encode(),
            b"shipped" if i % 3 else b"pending",
            f"{(i % 10000) / 100:.2f}".encode(),
            str(i % 50).encode(),
            f"{(i % 997) * 1.25}".encode(),
            f"order note number {i} with some text".encode(),
            b"2024-05-06 07:08:09.123456",
            b"2024-05-06 07:08:10",
            str(i % 2).encode(),
        ]
        row = query_pb2.Row(lengths=[len(v) for v in vals], values=b"".join(vals))
        out.append(binlogdata_pb2.RowChange(after=row))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-schemas", action="store_true")
    args = ap.parse_args()
    schemas = not args.no_schemas
    cfg = EncoderConfig(
        logical_name="bench",
        key_schemas_enable=schemas,
        value_schemas_enable=schemas,
        headers=tuple(context_headers("bench", "0", "bench-connector")),
    )
    fe = binlogdata_pb2.FieldEvent(table_name="ks.orders", fields=FIELDS, keyspace="ks", shard="-80")
    plan = TablePlan.compile(fe, cfg)
    ctx = SourceContext(
        keyspace="ks", shard="-80", commit_seconds=1714979289,
        vgtid='[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5000"}]',
    )
    rows = make_rows(args.rows)
    encode = plan.encode_change
    encoder = "native" if plan._native is not None else "python"
    walls, cpus = [], []
    size = 0
    for _ in range(args.runs):
        size = 0
        now = time.time_ns()
        t0, c0 = time.perf_counter(), time.process_time()
        for rc in rows:
            for rec in encode(rc, ctx, now):
                size += len(rec.value or b"")
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    dt, cpu = statistics.median(walls), statistics.median(cpus)
    print(
        f"encoder={encoder} (extension built: {native.available()}) rows={args.rows} schemas={schemas} "
        f"runs={args.runs} median wall={dt:.3f}s rows/s={args.rows / dt:,.0f} "
        f"cpu/row={cpu / args.rows * 1e6:.2f}us avg_value_bytes={size / args.rows:.0f}"
    )


if __name__ == "__main__":
    main()
