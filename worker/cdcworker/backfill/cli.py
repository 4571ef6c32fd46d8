"""``shardcdc backfill``: run a snapshot backfill (local threads or Spark) with a live progress view."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from cdcworker import kafkaclients

if TYPE_CHECKING:  # imported where used: `shardcdc backfill --help` stays quick
    from rich.live import Live
    from rich.table import Table

    from cdcworker.backfill.progress import ProgressTracker, RunStatus
    from cdcworker.backfill.spec import BackfillSpec
    from cdcworker.backfill.store import ProgressStore
    from cdcworker.config import WorkerConfig

log = logging.getLogger("cdcworker.backfill")


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("-c", "--config", action="append", default=[], metavar="FILE",
                        help="connector configuration (as for `shardcdc worker`); repeat to layer files")
    parser.add_argument("--set", action="append", default=[], metavar="PROP=VALUE", help="override one property")
    parser.add_argument("-t", "--table", action="append", required=True, metavar="REGEX",
                        help="table (or keyspace.table) pattern to backfill; repeatable")
    parser.add_argument("--condition", action="append", default=[], metavar="TABLE=SQL",
                        help="additional-condition for a table (as in execute-snapshot); repeatable")
    parser.add_argument("--run-id", default="", help="run id (rerun with the same id to resume); default: random")
    parser.add_argument("--shards", default="", help="comma-separated shards (default: every serving shard)")
    parser.add_argument("--engine", choices=("local", "spark"), default="local")
    parser.add_argument("--master", default="local[2]", help="Spark master for --engine spark ('' = from spark-submit)")
    parser.add_argument("--parallelism", type=int, default=2, help="lanes run at once by the local engine")
    parser.add_argument("--chunk-size", type=int, default=8096)
    parser.add_argument("--max-chunks", type=int, default=4096, help="per shard and table")
    parser.add_argument("--max-concurrent-chunks", type=int, default=2, help="per shard")
    parser.add_argument("--rows-per-second", type=float, default=0.0, help="per shard; 0 = unthrottled")
    parser.add_argument("--progress-topic", default="")
    parser.add_argument("--await-holds", action="store_true",
                        help="read a shard's chunks only once its worker holds the tables back (the operator sets "
                             "it: its connectors have workers; without workers the run would wait in vain)")
    parser.add_argument("--hold-timeout", type=float, default=600.0, metavar="SECONDS",
                        help="with --await-holds: fail when a shard's hold is not acknowledged in time")
    parser.add_argument("--no-view", action="store_true", help="no live progress view (log lines only)")
    return run


def spec_from_args(args: argparse.Namespace) -> BackfillSpec:
    from cdcworker.backfill.spec import BackfillSpec

    props = dict(kv.split("=", 1) for kv in args.set)
    conditions = dict(c.split("=", 1) for c in args.condition)
    return BackfillSpec(
        run_id=args.run_id or f"bf-{uuid.uuid4().hex[:12]}",
        tables=tuple(args.table),
        properties=props,
        config_files=tuple(args.config or ([os.environ["SHARDCDC_CONFIG"]] if os.environ.get("SHARDCDC_CONFIG") else [])),
        conditions=conditions,
        shards=tuple(s for s in args.shards.split(",") if s),
        chunk_size=args.chunk_size,
        max_chunks=args.max_chunks,
        max_concurrent_chunks_per_shard=args.max_concurrent_chunks,
        rows_per_second_per_shard=args.rows_per_second,
        progress_topic=args.progress_topic,
        await_holds=args.await_holds,
        hold_timeout_seconds=args.hold_timeout,
    )


def render(tracker: ProgressTracker, run_id: str) -> Table:
    """The progress view: one line per shard and table, totals, rate and ETA."""
    from rich.table import Table

    table = Table(title=f"backfill {run_id}", expand=False)
    for col, justify in (("shard", "left"), ("table", "left"), ("chunks", "right"), ("rows", "right"), ("done", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for (shard, name), t in sorted(tracker.snapshot().items()):
        pct = 100.0 * t.chunks_done / t.chunks if t.chunks else 100.0
        table.add_row(shard, name, f"{t.chunks_done}/{t.chunks}", f"{t.rows_done:,}/{max(t.rows, t.rows_done):,}", f"{pct:5.1f}%")
    eta = tracker.eta_seconds()
    table.caption = (f"{tracker.chunks_done}/{tracker.chunks_total} chunks, {tracker.rows_done:,}/{tracker.rows_total:,} rows, "
                     f"{tracker.rate():,.0f} rows/s, ETA {'-' if eta is None else f'{eta:,.0f} s'}")
    return table


def _run_recorder(store: ProgressStore, config: WorkerConfig) -> Callable[[RunStatus], None]:
    """Writes the run's ``run`` records (started, finished, error) for the operator's status; a
    failure to write one is logged, never fatal (the chunks' records are what matters)."""
    from confluent_kafka import KafkaException

    from cdcworker.config.clients import producer_config

    producer = kafkaclients.producer(producer_config(config), "backfill producer")

    def record(rec: RunStatus) -> None:
        try:
            store.write(producer, [rec], timeout=30)
        except (KafkaException, RuntimeError) as exc:
            log.warning("backfill %s: run record not written: %s", rec.run_id, exc)

    return record


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event, spark: Callable[[], Any]) -> Iterator[None]:  # Any: a pyspark SparkSession (optional dependency, not type-checked)
    """SIGTERM (the Job or SparkApplication was deleted, local mode stops) or SIGINT: lanes stop
    before their next chunk and Spark's jobs are cancelled, so the run ends as a failed attempt and
    is abandoned (the workers release it; rerunning it resumes). The previous handlers come back."""
    import signal

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()
        session = spark()
        if session is not None:
            session.sparkContext.cancelAllJobs()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    from cdcworker.backfill.job import (
        RunCancelled,
        UnsafeSparkConf,
        abandon,
        progress_store,
        run_backfill,
        spark_session,
        worker_config,
    )
    from cdcworker.backfill.progress import ChunkDone, PlanRecord, ProgressTracker, RunStatus

    logging.basicConfig(level=os.environ.get("SHARDCDC_LOG_LEVEL", "WARNING").upper(),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    spec = spec_from_args(args)
    tracker = ProgressTracker()
    stop = threading.Event()
    lock = threading.Lock()

    def on_record(rec: PlanRecord | ChunkDone) -> None:
        with lock:
            if isinstance(rec, PlanRecord):
                if rec.run_id == spec.run_id:
                    tracker.plan([rec])
            elif rec.chunk.run_id == spec.run_id:
                tracker.done(rec)

    sigterm = threading.Event()  # set by SIGTERM/SIGINT: stop the lanes, abandon the attempt
    config = worker_config(spec)
    store = progress_store(spec, config)
    store.ensure_topic()
    started_ms = int(time.time() * 1000)
    record_run = _run_recorder(store, config)
    record_run(RunStatus(spec.run_id, "running", started_ms))
    follower = threading.Thread(target=store.follow, args=(on_record, stop.is_set), daemon=True, name="progress")
    follower.start()
    spark = None
    live: Live | None = None
    failure: BaseException | None = None
    with _stop_on_signals(sigterm, lambda: spark):
        try:
            if not args.no_view:
                from rich.live import Live

                live = Live(render(tracker, spec.run_id), refresh_per_second=2, transient=False)
                live.start()

                def refresh() -> None:
                    while not stop.wait(0.5):
                        with lock:
                            live.update(render(tracker, spec.run_id))

                threading.Thread(target=refresh, daemon=True, name="progress-view").start()
            if args.engine == "spark":
                spark = spark_session(args.master or None)
            result = run_backfill(spec, engine=args.engine, spark=spark, parallelism=args.parallelism, stop=sigterm)
        except Exception as exc:  # reported once, with the run id to resume with
            failure = exc
        finally:
            stop.set()
            follower.join(5)
            if live is not None:
                with lock:
                    live.update(render(tracker, spec.run_id))
                live.stop()
            if spark is not None:
                spark.stop()  # no task of this run runs after this: the abandon marker below is safe
    if failure is not None:
        hint = "" if isinstance(failure, RunCancelled) else f" (rerun with --run-id {spec.run_id} to resume)"
        log.error("backfill %s failed: %s%s", spec.run_id, failure, hint)
        print(f"backfill {spec.run_id} failed: {failure}", file=sys.stderr)
        record_run(RunStatus(spec.run_id, "failed", started_ms, int(time.time() * 1000), str(failure)[:1000]))
        if not isinstance(failure, (RunCancelled, UnsafeSparkConf)):  # the latter started nothing
            _release(abandon, spec, str(failure))
        return 1
    record_run(RunStatus(spec.run_id, "succeeded", started_ms, int(time.time() * 1000)))
    print(f"backfill {result.run_id}: {result.chunks_read} chunks read, {result.chunks_skipped} already done, "
          f"{result.rows:,} rows in {result.seconds:.1f} s ({result.rows_per_second:,.0f} rows/s)")
    return 0


def _release(abandon: Callable[[BackfillSpec, str], object], spec: BackfillSpec, reason: str) -> None:
    """The job's abandon marker: the workers release this attempt's holds and catch up (a failure
    to write it is logged: the operator writes its own once it sees the run failed)."""
    from confluent_kafka import KafkaException

    try:
        abandon(spec, reason)
    except (KafkaException, RuntimeError) as exc:
        log.warning("backfill %s: abandon marker not written: %s", spec.run_id, exc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="shardcdc backfill")
    return register(parser)(parser.parse_args(argv))
