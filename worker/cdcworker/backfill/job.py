"""The backfill job: plan chunks (driver), read + reconcile + emit chunks (executors), engines.

Driver: ``plan_run`` lists the shards and matching tables, splits each (shard, table) into chunks
and records the plan in the progress topic (a rerun reuses it, so chunk numbers stay stable).
Executors: ``run_lane`` processes a lane of chunks: skip the ones the progress topic marks done,
otherwise low watermark, chunk read, high watermark, window changes, merge, emit ``op=r`` records
with the worker's encoder, wait for Kafka, then mark the chunk done. Only chunk descriptors and
small per-chunk results cross between driver and executors; rows go from VTGate to Kafka inside
the executor.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import orjson
from confluent_kafka import KafkaError, Producer

from cdcworker import kafkaclients
from cdcworker.backfill import chunking, rowchange
from cdcworker.backfill.progress import (
    AttemptRecord,
    ChunkDone,
    PlanRecord,
    RunAbandoned,
    RunState,
    parse_hold,
)
from cdcworker.backfill.reconcile import KeyReader, reconcile
from cdcworker.backfill.spec import BackfillSpec, Chunk, Key
from cdcworker.backfill.store import ProgressStore
from cdcworker.backfill.throttle import RowThrottle
from cdcworker.backfill.vtgate import QueryError, VTGateClient, Window
from cdcworker.config import WorkerConfig, load_config
from cdcworker.events import EncoderConfig, SourceContext, TablePlan
from cdcworker.jsontypes import JsonObject
from cdcworker.offsets import Vgtid
from vitessapi import binlogdata_pb2

log = logging.getLogger(__name__)

PRI_KEY_FLAG = 2
ISINTEGRAL = 256
SNAPSHOT_INCREMENTAL = "incremental"


# --- configuration ---------------------------------------------------------------------------


def worker_config(spec: BackfillSpec) -> WorkerConfig:
    """The connector's configuration, loaded where the code runs (secrets resolve locally)."""
    return load_config(spec.config_files, overrides=dict(spec.properties))


def progress_topic(spec: BackfillSpec, config: WorkerConfig) -> str:
    return spec.progress_topic or f"{config.topic_prefix}.backfill-progress"


def progress_store(spec: BackfillSpec, config: WorkerConfig) -> ProgressStore:
    return ProgressStore(
        config.kafka.client_config("producer"),
        progress_topic(spec, config),
        replication_factor=config.kafka.offsets_replication_factor,
    )


# A chunk's read and its watermark streams must see one tablet's history (docs/backfill.md): VTGate
# may route calls for REPLICA to different replicas of a shard, whose positions differ, and a
# change between a lagging read and the low watermark would be in neither. The primary is one
# tablet per shard, so backfills read from it whatever vitess.tablet.type the stream uses.
BACKFILL_TABLET_TYPE = "PRIMARY"


def client_for(config: WorkerConfig) -> VTGateClient:
    from cdcworker.config.clients import channel_settings

    return VTGateClient(channel_settings(config), config.source.keyspace, BACKFILL_TABLET_TYPE)


# --- planning (driver) -------------------------------------------------------------------------


@dataclass(frozen=True)
class TableShape:
    pk: tuple[str, ...]
    integral_single: bool


def table_shape(fields: Sequence[Any]) -> TableShape:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    pk = tuple(f.name for f in fields if f.flags & PRI_KEY_FLAG)
    if not pk:
        raise ValueError("table has no primary key: a chunked backfill needs one")
    first = next(f for f in fields if f.name == pk[0])
    return TableShape(pk, len(pk) == 1 and bool(first.type & ISINTEGRAL))


def _cell(row: Any, i: int) -> bytes | None:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    lengths = row.lengths
    if lengths[i] < 0:
        return None
    start = sum(n for n in lengths[:i] if n > 0)
    return bytes(row.values[start : start + lengths[i]])


def _key_value(raw: bytes, integral: bool) -> int | str:
    return int(raw) if integral else raw.decode("utf-8", "surrogateescape")


def plan_table(
    client: VTGateClient, spec: BackfillSpec, shard: str, table: str
) -> tuple[PlanRecord, list[Chunk]]:
    """Split one table on one shard (a few small queries; no rows are fetched)."""
    ks = client.keyspace
    cond = spec.condition_for(ks, table)
    fields = client.execute(chunking.columns_select(table), shard=shard).fields
    shape = table_shape(fields)
    integral = {f.name: bool(f.type & ISINTEGRAL) for f in fields}
    sql, binds = chunking.stats_select(table, shape.pk, cond)
    row = client.execute(sql, binds, shard=shard).rows[0]
    count = int(_cell(row, 0) or b"0")
    lo_raw, hi_raw = _cell(row, 1), _cell(row, 2)
    stats = chunking.TableStats(
        count,
        None if lo_raw is None or not shape.integral_single else int(lo_raw),
        None if hi_raw is None or not shape.integral_single else int(hi_raw),
    )
    size = chunking.effective_chunk_size(count, spec.chunk_size, spec.max_chunks)
    if count == 0:
        method, points = "even", []
    elif chunking.is_dense(stats, shape.integral_single):
        method, points = "even", chunking.even_points(stats, spec.chunk_size, spec.max_chunks)
    else:
        method = "query"

        def next_point(start: Key | None) -> Key | None:
            q, b = chunking.split_select(table, shape.pk, start, size, cond)
            rows = client.execute(q, b, shard=shard).rows
            if not rows:
                return None
            r = rows[0]
            return tuple(_key_value(_cell(r, i) or b"", integral[c]) for i, c in enumerate(shape.pk))

        points = chunking.query_points(next_point, spec.max_chunks)
    bounds = chunking.bounds_from_points(points)
    chunks = chunking.make_chunks(spec.run_id, ks, shard, table, shape.pk, bounds, count, cond)
    rec = PlanRecord(spec.run_id, ks, shard, table, shape.pk, len(chunks), count, method, tuple(points), cond)
    return rec, chunks


def chunks_of(rec: PlanRecord) -> list[Chunk]:
    """Rebuild a recorded plan's chunks exactly (a rerun must not re-split a changed table)."""
    bounds = chunking.bounds_from_points(rec.points)
    return chunking.make_chunks(rec.run_id, rec.keyspace, rec.shard, rec.table, rec.pk, bounds,
                                rec.estimated_rows, rec.condition)


def plan_run(
    spec: BackfillSpec, client: VTGateClient, state: RunState
) -> tuple[list[PlanRecord], list[PlanRecord], list[Chunk]]:
    """(all plans, plans new in this call, chunks). Plans already in the topic are reused."""
    shards = list(spec.shards) or client.shards()
    tables = [t for t in client.tables() if spec.matches(client.keyspace, t)]
    if not tables:
        raise ValueError(f"no table of keyspace {client.keyspace} matches {list(spec.tables)}")
    plans: list[PlanRecord] = []
    new: list[PlanRecord] = []
    chunks: list[Chunk] = []
    for shard in shards:
        for table in tables:
            rec = state.plans.get((shard, table))
            if rec is None:
                rec, table_chunks = plan_table(client, spec, shard, table)
                new.append(rec)
            else:
                table_chunks = chunks_of(rec)
            plans.append(rec)
            chunks.extend(table_chunks)
    return plans, new, chunks


# --- one chunk (executor) ------------------------------------------------------------------------


@dataclass
class ChunkStats:
    """What an executor reports back for one chunk (small; collected by the driver)."""

    shard: str
    table: str
    index: int
    skipped: bool
    rows: int = 0
    read_rows: int = 0
    window_changes: int = 0
    seconds: float = 0.0
    throttled_seconds: float = 0.0

    def to_dict(self) -> JsonObject:
        return dict(self.__dict__)


class _Delivery:
    """One delivery callback object per chunk (not per record)."""

    __slots__ = ("errors",)

    def __init__(self) -> None:
        self.errors: list[KafkaError] = []

    def __call__(self, err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            self.errors.append(err)


@dataclass
class LaneContext:
    """Per-lane resources: one VTGate channel, one producer, the encoder and the throttle."""

    spec: BackfillSpec
    config: WorkerConfig
    client: VTGateClient
    producer: Producer
    encoder: EncoderConfig
    store: ProgressStore
    throttle: RowThrottle
    plans: dict[tuple[str, str], TablePlan] = field(default_factory=dict)
    on_read: Callable[[Chunk], None] | None = None  # test hook: called right after a chunk read
    chunks_done: int = 0  # chunks this lane finished in this process (the fault hook's condition)

    @classmethod
    def open(cls, spec: BackfillSpec, lanes_per_shard: int) -> LaneContext:
        from cdcworker.allocator import tune_for_producing
        from cdcworker.config.clients import encoder_config, producer_config

        tune_for_producing()  # the lane's own Producer, not a KafkaSink (which tunes itself)
        config = worker_config(spec)
        rate = spec.rows_per_second_per_shard / max(1, lanes_per_shard)
        return cls(
            spec,
            config,
            client_for(config),
            kafkaclients.producer(producer_config(config), "backfill producer"),
            encoder_config(config),
            progress_store(spec, config),
            RowThrottle(rate),
        )

    def close(self) -> None:
        self.producer.flush(30)
        self.client.close()


def _field_event(chunk: Chunk, fields: Sequence[Any]) -> Any:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    # Copy-phase FIELD events carry string ENUM/SET values, as Execute results do.
    return binlogdata_pb2.FieldEvent(
        table_name=f"{chunk.keyspace}.{chunk.table}",
        fields=list(fields),
        keyspace=chunk.keyspace,
        shard=chunk.shard,
        enum_set_string_values=True,
    )


def _key_reader(chunk: Chunk, fields: Sequence[Any]) -> KeyReader:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    names = [f.name for f in fields]
    idx = [names.index(c) for c in chunk.pk]
    return KeyReader(idx, [bool(fields[i].type & ISINTEGRAL) for i in idx])


# Reads of one chunk whose window saw a DDL of its table, before the chunk fails.
SCHEMA_CHANGE_ATTEMPTS = 3


def _read_reconcilable(chunk: Chunk, ctx: LaneContext) -> tuple[Any, list[Any], str, Window]:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
    """Low watermark, read, high watermark and the window read up to it: (fields, rows, high, window
    with its changes). A window with a DDL of the table is read again from a new low
    watermark (its rows have two column layouts, and the read has one of them)."""
    client = ctx.client
    for _ in range(SCHEMA_CHANGE_ATTEMPTS):
        window = client.open_window(chunk.shard, chunk.table)
        try:
            sql, binds = chunking.chunk_select(chunk)
            fields, rows = client.stream_execute(sql, binds, shard=chunk.shard)
            if ctx.on_read is not None:
                ctx.on_read(chunk)
            high = client.current_position(chunk.shard)
            window.read_until(high)
        finally:
            window.close()
        if not window.schema_changed:
            return fields, rows, high, window
        log.info("chunk %s: %s changed its columns inside the window; reading the chunk again", chunk.ident, chunk.table)
    raise QueryError(f"chunk {chunk.ident}: {chunk.table} changed its columns in each of {SCHEMA_CHANGE_ATTEMPTS} "
                     "windows (DDL); the chunk is retried with the task")


def process_chunk(chunk: Chunk, ctx: LaneContext) -> ChunkStats:
    """Low watermark, read, high watermark, window, merge, emit, mark done."""
    t0 = time.monotonic()
    fields, rows, high, window = _read_reconcilable(chunk, ctx)
    changes, window_fields = window.changes, window.field_event
    throttled = ctx.throttle.wait(len(rows))
    plan = TablePlan.compile(_field_event(chunk, fields), ctx.encoder) if fields else None
    key_of = _key_reader(chunk, fields) if fields else None
    emitted = 0
    if plan is not None and key_of is not None:
        merged = reconcile(rows, changes, key_of, chunk.contains)
        vgtid = Vgtid.of(chunk.keyspace, {chunk.shard: high}).to_json()
        ctx_src = SourceContext(chunk.keyspace, chunk.shard, int(time.time()), vgtid, snapshot=SNAPSHOT_INCREMENTAL)
        delivery = _Delivery()
        produce = ctx.producer.produce
        poll = ctx.producer.poll
        now = time.time_ns()

        def send(p: TablePlan, items: Iterable[Any]) -> int:  # Any: vitessapi protobuf messages (generated code: no types for mypy)
            n = 0
            for row in items:
                for rec in p.encode_change(rowchange.read(row), ctx_src, now, insert_op="r"):
                    while True:
                        try:
                            produce(rec.topic, rec.value, rec.key, headers=cast(Any, rec.headers), on_delivery=delivery)
                            break
                        except BufferError:
                            poll(0.05)  # librdkafka's queue is full: back-pressure
                    n += 1
            return n

        half = len(merged.kept) // 2
        emitted = send(plan, merged.kept[:half])
        if half >= 2:
            _fault_point(ctx, chunk, key_of(merged.kept[0]))
        emitted += send(plan, merged.kept[half:])
        if merged.changed:
            # Window rows are binlog renderings: encode them as the streaming path would.
            wplan = TablePlan.compile(window_fields, ctx.encoder) if window_fields is not None else plan
            emitted += send(wplan, merged.changed)
        remaining = ctx.producer.flush(120)
        if remaining or delivery.errors:
            raise RuntimeError(f"chunk {chunk.ident}: {remaining} undelivered, errors: {delivery.errors[:3]}")
        rows_out = merged.rows
    else:
        rows_out = 0
    done = ChunkDone(chunk, rows_out, window.low, high, len(changes), int(time.time() * 1000), ctx.spec.epoch)
    ctx.store.write(ctx.producer, [done])
    ctx.chunks_done += 1
    log.debug("chunk %s: %d rows (%d records), window %d changes", chunk.ident, rows_out, emitted, len(changes))
    return ChunkStats(chunk.shard, chunk.table, chunk.index, False, rows_out, len(rows), len(changes),
                      time.monotonic() - t0, throttled)


FAULT_DIR_ENV = "CDC_BACKFILL_FAULT_DIR"  # not SHARDCDC_*: those are connector properties


def _fault_point(ctx: LaneContext, chunk: Chunk, sent: Key) -> None:
    """Test hooks, both off unless ``$CDC_BACKFILL_FAULT_DIR`` is set and fire once (the atomic
    rename of their trigger file).

    ``armed``: the first chunk to get here (at least two records delivered) kills its process, a
    Spark task dying mid-chunk, after deleting the row ``sent`` it delivered through VTGate (its key
    goes to ``fired``). The retry then reads the chunk without that row at a later high watermark:
    the stale snapshot row is the case the catch-up's final changes must cover.

    ``hold-armed``: the first chunk to get here in a lane that already finished a chunk in this
    process stops half-delivered and writes ``held`` (its pid, chunk and first key), then waits for
    the test to kill a process (its executor JVM, or the driver) before it is done. Without a kill
    within ``HOLD_SECONDS`` the chunk fails: a hold nobody ended must not pass silently."""
    d = os.environ.get(FAULT_DIR_ENV)
    if not d:
        return
    if ctx.chunks_done >= 1 and _fire(d, "hold-armed", "holding"):
        _hold_mid_chunk(d, ctx, chunk, sent)
        return
    if not _fire(d, "armed", "fired"):
        return
    ctx.producer.flush(30)
    where = " AND ".join(f"{chunking.quote(c)} = :k{i}" for i, c in enumerate(chunk.pk))
    ctx.client.execute(f"DELETE FROM {chunking.quote(chunk.table)} WHERE {where}",
                       {f"k{i}": v for i, v in enumerate(sent)}, shard=chunk.shard)
    with open(os.path.join(d, "fired"), "wb") as f:
        f.write(orjson.dumps({"table": chunk.table, "shard": chunk.shard, "key": list(sent)}))
    os._exit(70)


HOLD_SECONDS = 300.0


def _fire(d: str, trigger: str, fired: str) -> bool:
    try:
        os.rename(os.path.join(d, trigger), os.path.join(d, fired))  # atomic: fires once
    except OSError:
        return False
    return True


def _hold_mid_chunk(d: str, ctx: LaneContext, chunk: Chunk, sent: Key) -> None:
    ctx.producer.flush(30)  # the first half is in Kafka: a rerun of the chunk delivers it again
    info = {"pid": os.getpid(), "table": chunk.table, "shard": chunk.shard, "index": chunk.index, "key": list(sent)}
    tmp = os.path.join(d, "held.tmp")
    with open(tmp, "wb") as f:
        f.write(orjson.dumps(info))
    os.rename(tmp, os.path.join(d, "held"))  # the test sees the whole record or none
    threading.Event().wait(HOLD_SECONDS)  # the test kills this process meanwhile
    raise RuntimeError(f"chunk {chunk.ident}: held by the fault hook for {HOLD_SECONDS:.0f}s and not killed")


def run_lane(
    chunks: Iterable[Chunk],
    spec: BackfillSpec,
    lanes_per_shard: int,
    on_read: Callable[[Chunk], None] | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> Iterator[ChunkStats]:
    """Process one lane; chunks the progress topic marks done are skipped (rerun, task retry)."""
    items = list(chunks)
    if not items:
        return
    ctx = LaneContext.open(spec, lanes_per_shard)
    ctx.on_read = on_read
    try:
        state = ctx.store.load(spec.run_id)
        for chunk in items:
            if cancelled():
                return
            if state.is_done(chunk):
                yield ChunkStats(chunk.shard, chunk.table, chunk.index, True)
                continue
            yield process_chunk(chunk, ctx)
    finally:
        ctx.close()


# --- engines (driver) -------------------------------------------------------------------------------


@dataclass
class RunResult:
    run_id: str
    chunks_total: int
    chunks_read: int
    chunks_skipped: int
    rows: int
    read_rows: int
    window_changes: int
    seconds: float
    plans: list[PlanRecord]
    job_seconds: float = 0.0  # the chunks' phase alone (planning and hand-shake excluded)
    chunk_seconds: float = 0.0  # the chunks' own times, summed over lanes

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def busy(self, cores: int) -> float:
        """How busy ``cores`` were with chunks during the chunks' phase (1.0: no lane waited for
        a task slot's set-up and none finished early)."""
        return self.chunk_seconds / (cores * self.job_seconds) if self.job_seconds > 0 else 0.0


def _spark_partition(spec_json: bytes, lanes_per_shard: int, lanes: Iterable[list[bytes]]) -> Iterator[JsonObject]:
    """A Spark partition holds one lane; yields only small per-chunk stats to the driver."""
    spec = BackfillSpec.from_json(spec_json)
    for lane in lanes:
        for st in run_lane([Chunk.from_json(x) for x in lane], spec, lanes_per_shard):
            yield st.to_dict()


def run_spark(spark: Any, spec: BackfillSpec, lanes: list[list[Chunk]], lanes_per_shard: int) -> list[ChunkStats]:  # Any: a pyspark SparkSession (optional dependency, not type-checked)
    """One Spark task per lane (``parallelize`` with one slice per element keeps lanes whole)."""
    import functools

    data = [[c.to_json() for c in lane] for lane in lanes]
    rdd = spark.sparkContext.parallelize(data, len(data))
    fn = functools.partial(_spark_partition, spec.to_json(), lanes_per_shard)
    return [ChunkStats(**d) for d in rdd.mapPartitions(fn).collect()]


class RunStopped(RuntimeError):
    """The run was asked to stop (SIGTERM: its Job or application was deleted, or local mode stops)."""


def run_local(spec: BackfillSpec, lanes: list[list[Chunk]], lanes_per_shard: int, parallelism: int,
              on_read: Callable[[Chunk], None] | None = None, stop: threading.Event | None = None
              ) -> list[ChunkStats]:
    """In-process engine (local mode, tests): lanes on a thread pool; a failed lane stops the
    others before their next chunk (as a failed Spark job does), and the error is raised. When it
    returns or raises, no lane runs any more (the pool is joined): an abandon marker written then
    cannot be overtaken by a chunk of this run."""
    failed = threading.Event()
    stopping = stop or threading.Event()
    with ThreadPoolExecutor(max_workers=max(1, parallelism), thread_name_prefix="backfill-lane") as pool:

        def one(lane: list[Chunk]) -> list[ChunkStats]:
            try:
                return list(run_lane(lane, spec, lanes_per_shard, on_read,
                                     lambda: failed.is_set() or stopping.is_set()))
            except BaseException:
                failed.set()
                raise

        futures = [pool.submit(one, lane) for lane in lanes]
        out: list[ChunkStats] = []
        for f in futures:
            out.extend(f.result())
    if stopping.is_set():
        raise RunStopped(f"backfill {spec.run_id} stopped before all chunks were read")
    return out


class RunCancelled(RuntimeError):
    """The progress topic says the run is over (cancelled, or failed for good): it is not resumed."""


class UnsafeSparkConf(ValueError):
    """A Spark setting under which the job's guarantees do not hold; the run refuses to start."""


def check_spark_conf(conf: Callable[[str], str | None]) -> None:
    """Refuse ``spark.speculation=true``: Spark would run a second attempt of a slow lane while the
    first still runs, and nothing fences the first. Its records could reach Kafka after the retry's
    chunk was marked done and after the worker's catch-up, leaving a stale row as a key's last
    record. A retry after a failure is safe (the failed attempt is dead), speculation is not. The
    CRD rejects the setting in ``spec.snapshot.backfill.sparkConf``; this covers spark-submit
    users and local runs. ``conf`` reads a setting of the running context (None: unset)."""
    value = conf("spark.speculation")
    if value is not None and value.strip().lower() == "true":
        raise UnsafeSparkConf(
            "spark.speculation=true is not supported by the backfill: a speculative attempt of a chunk could emit "
            "its rows after the chunk's catch-up and leave a stale row last; unset it (Spark's default is false)")


class HoldTimeout(RuntimeError):
    """The workers did not acknowledge the hold of some shards in time."""


def run_backfill(
    spec: BackfillSpec,
    engine: str = "local",
    spark: Any = None,  # Any: a pyspark SparkSession (optional dependency, not type-checked)
    parallelism: int = 2,
    on_planned: Callable[[list[PlanRecord]], None] | None = None,
    on_read: Callable[[Chunk], None] | None = None,
    stop: threading.Event | None = None,
) -> RunResult:
    """Plan (or reload the plan), open this attempt's epoch, wait for the workers' holds when
    ``spec.await_holds``, run the chunks not yet done, return the totals. ``on_planned`` is called
    once the plan is recorded (and the holds acknowledged, when awaited), before any chunk is read."""
    from cdcworker.backfill.lanes import make_lanes
    from cdcworker.config.clients import producer_config

    if spark is not None:
        check_spark_conf(spark.sparkContext.getConf().get)
    t0 = time.monotonic()
    config = worker_config(spec)
    # Made first: an idempotent producer needs its producer id (0.5-1 s after start) before its
    # first write completes; planning meanwhile hides that wait.
    producer = kafkaclients.producer(producer_config(config), "backfill producer")
    store = progress_store(spec, config)
    store.ensure_topic()
    state = store.load(spec.run_id)
    if state.cancelled is not None:
        raise RunCancelled(f"backfill {spec.run_id} was abandoned ({state.cancelled.reason or 'cancelled'}) and "
                           f"cannot be resumed: start a new run id")
    spec = spec.with_(epoch=state.next_epoch())
    client = client_for(config)
    try:
        plans, new, chunks = plan_run(spec, client, state)
    finally:
        client.close()
    # Plans first, then the attempt: a worker that sees the attempt sees every plan of it.
    store.write(producer, [*new, AttemptRecord(spec.run_id, config.source.keyspace, spec.epoch)])
    todo = [c for c in chunks if not state.is_done(c)]
    if spec.await_holds and todo:
        await_holds(store, spec, config.source.keyspace, plans, {c.shard for c in todo})
    if on_planned is not None:
        on_planned(plans)
    per_shard = spec.max_concurrent_chunks_per_shard
    lanes = make_lanes(todo, per_shard)
    t_job = time.monotonic()
    if engine == "spark":
        stats = run_spark(spark, spec, lanes, per_shard) if lanes else []
    elif engine == "local":
        stats = run_local(spec, lanes, per_shard, parallelism, on_read, stop)
    else:
        raise ValueError(f"unknown engine {engine!r} (local or spark)")
    job_seconds = time.monotonic() - t_job
    read = [s for s in stats if not s.skipped]
    return RunResult(
        spec.run_id,
        len(chunks),
        len(read),
        len(chunks) - len(read),
        sum(s.rows for s in read),
        sum(s.read_rows for s in read),
        sum(s.window_changes for s in read),
        time.monotonic() - t0,
        plans,
        job_seconds,
        sum(s.seconds for s in read),
    )


def await_holds(store: ProgressStore, spec: BackfillSpec, keyspace: str, plans: Sequence[PlanRecord],
                shards: set[str]) -> None:
    """The hand-shake: return once, for each of ``shards``, a worker's ``held`` marker of this epoch
    lists every planned table of the shard (its live records of them are in Kafka, and it emits no
    more of them until the catch-up); raise ``HoldTimeout`` after ``spec.hold_timeout_seconds``."""
    want: dict[str, set[str]] = {}
    for p in plans:
        if p.shard in shards:
            want.setdefault(p.shard, set()).add(p.table)
    held: dict[str, set[str]] = {}

    def missing() -> list[str]:
        return sorted(s for s, tables in want.items() if not tables <= held.get(s, set()))

    def done(value: bytes) -> bool:
        m = parse_hold(value)
        if m is not None and (m.run_id, m.keyspace, m.epoch) == (spec.run_id, keyspace, spec.epoch):
            held[m.shard] = set(m.tables)
        return not missing()

    if not missing() or store.watch(done, spec.hold_timeout_seconds):
        return
    raise HoldTimeout(f"backfill {spec.run_id}: no worker acknowledged the hold of shard(s) {', '.join(missing())} "
                      f"within {spec.hold_timeout_seconds:.0f}s (the connector's workers must be running; a run "
                      f"without workers must not ask for the hand-shake)")


def abandon(spec: BackfillSpec, reason: str) -> RunAbandoned:
    """Mark the run's current attempt abandoned, so the workers release its holds (the job's side:
    call it only once no lane of this process can emit a chunk any more). A later attempt of the
    same run opens the next epoch."""
    from cdcworker.config.clients import producer_config

    config = worker_config(spec)
    store = progress_store(spec, config)
    rec = RunAbandoned(spec.run_id, config.source.keyspace, store.load(spec.run_id).epoch, reason[:1000], "job")
    store.write(kafkaclients.producer(producer_config(config), "backfill progress producer"), [rec])
    return rec


GATEWAY_LAUNCHES = 3  # spark_session: launches of PySpark's Java gateway before giving up


def spark_session(master: str | None = "local[2]", app_name: str = "shardcdc-backfill", **conf: str) -> Any:  # Any: a pyspark SparkSession (optional dependency, not type-checked)
    """A SparkSession whose Python workers run this interpreter (so cdcworker is importable).
    ``master=None`` takes the master ``spark-submit`` was given."""
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    defaults = {
        "spark.ui.enabled": "false",
        "spark.driver.memory": "512m",
        "spark.python.worker.reuse": "true",
        "spark.sql.shuffle.partitions": "4",
    }
    for k, v in {**defaults, **conf}.items():
        builder = builder.config(k, v)
    # PySpark starts its Java gateway with Popen(preexec_fn=...): Python code between fork and exec.
    # In a process that already runs other threads (gRPC's, librdkafka's: local mode, the CLI), that
    # child can die before exec ("Java gateway process exited before sending its port number").
    # Each launch is a new fork, so a failed one is tried again; spark-submit's own drivers get
    # their gateway from the JVM and never launch one.
    for attempt in range(1, GATEWAY_LAUNCHES + 1):
        try:
            return builder.getOrCreate()
        except Exception as exc:
            if "JAVA_GATEWAY_EXITED" not in str(exc) or attempt == GATEWAY_LAUNCHES:
                raise
            log.warning("Spark's Java gateway exited at start (launch %d of %d): %s; launching it again",
                        attempt, GATEWAY_LAUNCHES, exc)
    raise AssertionError("unreachable")
