"""The backfill job (in-process engine) against the VTGate test server and a real broker:
exact output under a live workload, resumability, and the same bytes as the streaming path."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from backfill_fixtures import (
    KS,
    SHARDS,
    assert_topics_equal_source,
    catchup_start,
    handoffs,
    live_workload,
    make_keyspace,
    populate,
    props,
)
from confluent_kafka import KafkaException
from worker_fixtures import running_task

from cdcworker.backfill.catchup import run_catchup
from cdcworker.backfill.job import progress_store, run_backfill, worker_config
from cdcworker.backfill.spec import BackfillSpec, Chunk
from cdcworker.config import load_config
from cdcworker.offsets import Vgtid
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import materialise
from vtgatesim import VTGateSim
from vtgatesim.sql import Select

TABLES = ("items", "orders", "lines")


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        make_keyspace(s)
        yield s


class ReadCounter:
    """Counts chunk reads on the server side (``SELECT *`` without LIMIT through StreamExecute,
    whichever path serves it: rendered, pre-encoded, keys-only or key-index) per table."""

    def __init__(self, sim: VTGateSim) -> None:
        self.counts: dict[str, int] = {}
        ex = sim.executor
        inner = ex.stream_select

        def stream_select(sql: str, target: str = "", binds: Any = None) -> Any:
            stmt = ex.parse(sql)
            if isinstance(stmt, Select) and stmt.columns is None and stmt.limit is None:
                self.counts[stmt.table] = self.counts.get(stmt.table, 0) + 1
            return inner(sql, target, binds)

        ex.stream_select = stream_select  # type: ignore[method-assign]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _records(broker: KafkaBroker, topic: str) -> list[Any]:
    try:
        return consume_all(broker.bootstrap, topic, timeout=10)
    except KafkaException:  # not created yet
        return []


def test_backfill_under_live_workload_then_catchup_equals_source(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    loads = populate(sim, 1500)
    p = props(kafka_broker, sim)
    spec = BackfillSpec("run-live", TABLES, p, chunk_size=120, max_concurrent_chunks_per_shard=2)
    with live_workload(sim, loads) as count:
        result = run_backfill(spec, engine="local", parallelism=4)
        mid = Vgtid.of(KS, sim.positions(KS))  # the workload goes on: the catch-up must cross it
        deadline = time.monotonic() + 30
        while count["transactions"] < 300 and time.monotonic() < deadline:
            time.sleep(0.05)
    end = Vgtid.of(KS, sim.positions(KS))
    assert result.chunks_read == result.chunks_total >= 40
    assert result.window_changes > 0, "the workload must have hit chunk windows"
    state = progress_store(spec, worker_config(spec)).load(spec.run_id)
    assert state.complete
    h = handoffs(state, TABLES)
    cfg = load_config([], env={}, overrides=p)
    # The catch-up is interrupted half-way (a worker restart) and resumed from where it was.
    first = run_catchup(cfg, h, catchup_start(h), mid)
    second = run_catchup(cfg, h, first.position, end)
    assert first.suppressed + second.suppressed > 0, "changes inside chunk windows must not be emitted twice"
    states = assert_topics_equal_source(kafka_broker, sim, p["topic.prefix"])
    ops = {json.loads(r.value)["payload"]["op"] for r in consume_all(kafka_broker.bootstrap, f"{p['topic.prefix']}.{KS}.items") if r.value}
    assert ops == {"r", "c", "u", "d"}
    assert states["items"].duplicates == 0


def test_rerun_skips_finished_chunks(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    populate(sim, 800)
    p = props(kafka_broker, sim)
    spec = BackfillSpec("run-resume", ("items", "orders"), p, chunk_size=50, max_concurrent_chunks_per_shard=1)
    reads = ReadCounter(sim)
    seen: list[Chunk] = []

    def stop_halfway(chunk: Chunk) -> None:
        seen.append(chunk)
        if len(seen) == 12:
            raise RuntimeError("stopped half-way")

    with pytest.raises(RuntimeError, match="stopped half-way"):
        run_backfill(spec, engine="local", parallelism=1, on_read=stop_halfway)
    first_reads = reads.total
    state = progress_store(spec, worker_config(spec)).load(spec.run_id)
    done = len(state.done)
    total = sum(pl.chunks for pl in state.plans.values())
    assert 0 < done < total and first_reads == 12
    result = run_backfill(spec, engine="local", parallelism=2)
    assert (result.chunks_total, result.chunks_read, result.chunks_skipped) == (total, total - done, done)
    # The chunks' phase is inside the run, and two lanes at a time cannot be busier than two cores.
    assert 0 < result.job_seconds <= result.seconds and result.chunk_seconds > 0
    assert 0 < result.busy(2) <= 1.0
    assert reads.total - first_reads == total - done  # finished chunks were not read again
    assert progress_store(spec, worker_config(spec)).load(spec.run_id).complete
    again = run_backfill(spec, engine="local")
    assert again.chunks_read == 0 and reads.total - first_reads == total - done
    for table in ("items", "orders"):
        rows = {r.key for r in consume_all(kafka_broker.bootstrap, f"{p['topic.prefix']}.{KS}.{table}")}
        assert len(rows) == len(sim.source_truth(KS, table))


def test_a_replica_connectors_backfill_reads_from_the_primary(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    """VTGate may send REPLICA calls to different replicas of a shard, so a chunk read and its
    watermark streams could see different histories: backfills read every chunk from the primary."""
    populate(sim, 200)
    p = {**props(kafka_broker, sim), "vitess.tablet.type": "REPLICA"}
    targets: list[str] = []
    ex = sim.executor
    inner = ex.stream_select

    def stream_select(sql: str, target: str = "", binds: Any = None) -> Any:
        targets.append(target)
        return inner(sql, target, binds)

    ex.stream_select = stream_select  # type: ignore[method-assign]
    result = run_backfill(BackfillSpec("run-replica", ("items",), p, chunk_size=50), engine="local", parallelism=1)
    assert result.chunks_read == result.chunks_total > 1
    assert targets and all(t.endswith("@primary") for t in targets), sorted(set(targets))


def test_a_ddl_inside_a_chunk_window_reads_the_chunk_again(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    """Rows of a window with a DDL have two column layouts: a key whose last change came before the
    ALTER would be encoded with the new one. The chunk is read again from a new low watermark."""
    populate(sim, 120)
    p = props(kafka_broker, sim)
    reads = ReadCounter(sim)
    altered: list[str] = []

    def alter_once(chunk: Chunk) -> None:  # after the first read, before its high watermark
        if altered:
            return
        altered.append(chunk.ident)
        sim.execute("update items set qty = 111 where id % 2 = 0", KS)
        sim.execute("ALTER TABLE items ADD COLUMN note VARCHAR(16)", KS)
        sim.execute("update items set qty = 555 where id % 2 = 1", KS)

    spec = BackfillSpec("run-ddl", ("items",), p, chunk_size=1000)
    result = run_backfill(spec, engine="local", parallelism=1, on_read=alter_once)
    assert result.chunks_read == result.chunks_total and reads.total == result.chunks_total + 1
    rows = materialise(consume_all(kafka_broker.bootstrap, f"{p['topic.prefix']}.{KS}.items")).by_column("id")
    assert len(rows) == 120
    assert {(i % 2, r["qty"], "note" in r and r["note"] is None) for i, r in rows.items()} == {(0, 111, True), (1, 555, True)}


def test_snapshot_records_have_the_streaming_paths_bytes(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    sim.execute("insert into items (id, name, qty, price) values (1, 'a\\u00e9', 3, 4.50), (200, NULL, NULL, 0.05)", KS)
    p = props(kafka_broker, sim)
    prefix = p["topic.prefix"]
    topic = f"{prefix}.{KS}.items"
    # The streaming worker's copy phase (snapshot.mode=initial) and the backfill write the same topic.
    with running_task(load_config([], env={}, overrides={**p, "snapshot.mode": "initial"})) as run:
        deadline = time.monotonic() + 60
        while len(_records(kafka_broker, topic)) < 2:
            assert time.monotonic() < deadline, "copy phase produced nothing"
            time.sleep(0.1)
        run.stop()
    run_backfill(BackfillSpec("run-bytes", ("items",), p, chunk_size=10))
    records = consume_all(kafka_broker.bootstrap, topic)
    copy = {r.key: json.loads(r.value) for r in records if json.loads(r.value)["payload"]["op"] == "c"}
    snap = {r.key: json.loads(r.value) for r in records if json.loads(r.value)["payload"]["op"] == "r"}
    assert set(copy) == set(snap) and len(snap) == 2  # identical key bytes
    for key, c in copy.items():
        s = snap[key]
        assert s["schema"] == c["schema"]
        assert s["payload"]["after"] == c["payload"]["after"] and s["payload"]["before"] is None
        cs, ss = c["payload"]["source"], s["payload"]["source"]
        assert ss["snapshot"] == "incremental"
        assert {k: v for k, v in ss.items() if k not in ("snapshot", "vgtid", "ts_ms", "ts_us", "ts_ns")} == {
            k: v for k, v in cs.items() if k not in ("snapshot", "vgtid", "ts_ms", "ts_us", "ts_ns")
        }
        vg = json.loads(ss["vgtid"])
        assert vg == [{"keyspace": KS, "shard": ss["shard"], "gtid": sim.position(KS, ss["shard"]), "table_p_ks": []}]
    assert SHARDS  # keyspace layout used above


def test_cli_runs_a_backfill_and_shows_progress(sim: VTGateSim, kafka_broker: KafkaBroker, capsys: pytest.CaptureFixture[str]) -> None:
    from cdcworker.backfill import cli
    from cdcworker.backfill.progress import ChunkDone, PlanRecord, ProgressTracker

    populate(sim, 300)
    p = props(kafka_broker, sim)
    argv = ["--table", "orders", "--run-id", "cli-1", "--chunk-size", "40", "--no-view",
            "--condition", "orders=qty < 50", *[f"--set={k}={v}" for k, v in p.items()]]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    want = [r for r in sim.source_truth(KS, "orders") if int(r["qty"] or b"0") < 50]  # type: ignore[arg-type]
    assert f"{len(want):,} rows in" in out and "backfill cli-1:" in out
    assert cli.main(argv) == 0  # rerun: everything already done
    assert "0 chunks read" in capsys.readouterr().out
    # The view: one line per shard and table, totals, rate and ETA.
    from rich.console import Console

    tr = ProgressTracker(clock=lambda: 5.0)
    tr.plan([PlanRecord("cli-1", KS, "-40", "orders", ("id",), 2, 100, "even")])
    tr.done(ChunkDone(Chunk("cli-1", KS, "-40", "orders", 0, ("id",), None, (5,)), 60, "", ""))
    console = Console(width=120, record=True)
    console.print(cli.render(tr, "cli-1"))
    text = console.export_text()
    assert "-40" in text and "1/2" in text and "60/100" in text and "ETA" in text
