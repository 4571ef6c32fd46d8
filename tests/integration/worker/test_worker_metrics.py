"""Metrics of a running worker, scraped over HTTP during a workload: counts equal the events,
committed transactions per shard, Connected, queue gauges, lag falling to ~0 when idle, latency
histograms that count every transaction, and the low watermark."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from worker_fixtures import (
    caught_up,
    commerce_sim,
    running_task,
    wait_for,
    wait_positioned,
    worker_config,
)

from cdcworker.observability.server import ObservabilityServer
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim() as s:
        yield s


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("connector", "task")))
            out[(s.name, labels)] = s.value
    return out


def test_metrics_follow_the_workload(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"heartbeat.interval.ms": "1000", "max.queue.size": "4096"})
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        server = ObservabilityServer(run.task.metrics, 0, "127.0.0.1").start()
        try:
            port = server.port
            before = scrape(port)
            assert before[("shardcdc_connected", ())] in (0.0, 1.0)
            # 10 single-row transactions on -80 (ids 1 2 3 5 9 10 13 15 16 17) and 5 on 80-
            low = [1, 2, 3, 5, 9, 10, 13, 15, 16, 17]
            high = [4, 6, 7, 8, 11]
            for i in low + high:
                sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
            sim.execute_transaction([f"UPDATE customer SET email = 'x' WHERE id = {i}" for i in (1, 2, 3)], "commerce")
            wait_for(lambda: caught_up(sim, run), what="all delivered")
            wait_for(lambda: scrape(port)[("shardcdc_total_number_of_events_seen", ())] == 18, what="18 events counted")
            m = scrape(port)
            assert m[("shardcdc_connected", ())] == 1.0
            # 11 and 5 transactions of the workload, plus the position event VTGate sends when a
            # stream starts from "current" (a commit point without rows), one per shard
            low_txns = m[("shardcdc_number_of_committed_transactions", (("shard", "-80"),))]
            high_txns = m[("shardcdc_number_of_committed_transactions", (("shard", "80-"),))]
            assert (low_txns, high_txns) == (12, 6)
            assert m[("shardcdc_queue_total_capacity", ())] == 4096
            assert m[("shardcdc_queue_remaining_capacity", ())] == 4096  # nothing buffered between transactions
            assert m[("shardcdc_records_sent_total", ())] >= 18
            for hist in ("shardcdc_commit_to_read_seconds", "shardcdc_commit_to_emit_seconds"):
                assert m[(f"{hist}_count", ())] == low_txns + high_txns, hist
                assert m[(f"{hist}_bucket", (("le", "+Inf"),))] == low_txns + high_txns
            # acks are observed when the task flushes offsets and finds everything read durable
            wait_for(lambda: scrape(port)[("shardcdc_commit_to_ack_seconds_count", ())] >= 1, what="an observed ack")
            assert m[("shardcdc_milliseconds_since_last_event", ())] >= 0

            # Idle: VTGate heartbeats bring the lag to ~0 and move the low watermark to about now
            # (checked against the time of that same scrape: a later one may follow a stall).
            def idle() -> bool:
                at = time.time()
                s = scrape(port)
                lags = [s.get(("shardcdc_milliseconds_behind_source", (("shard", sh),))) for sh in ("-80", "80-")]
                lw_lag = s.get(("shardcdc_low_watermark_lag_seconds", ()))
                lw = s.get(("shardcdc_low_watermark_seconds", ()))
                return (all(v is not None and v < 1500 for v in lags) and lw_lag is not None and lw_lag < 3
                        and lw is not None and at - 3 < lw <= time.time() + 1)

            wait_for(idle, what="lag ~0 and a fresh low watermark while idle", timeout=20)
        finally:
            server.stop()
        run.stop()
    m_after = run.task.metrics
    assert m_after.state == "stopped"


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_records_acked_counts_what_kafka_holds(sim: VTGateSim, kafka_broker: KafkaBroker, exactly_once: bool) -> None:
    """``shardcdc_records_acked`` moves with the workload and ends equal to ``records_sent`` and to
    the records in the topic (exactly-once: the committed ones, read ``read_committed``)."""
    extra = {"exactly.once.support": "required", "poll.interval.ms": "50"} if exactly_once else {}
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra=extra)
    topic = f"{cfg.topic_prefix}.commerce.customer"
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        server = ObservabilityServer(run.task.metrics, 0, "127.0.0.1").start()
        try:
            port = server.port
            assert scrape(port)[("shardcdc_records_acked_total", ())] == 0
            for i in range(1, 6):
                sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
            wait_for(lambda: caught_up(sim, run), what="the inserts delivered")
            wait_for(lambda: scrape(port)[("shardcdc_records_acked_total", ())] == 5, what="5 records acked")
            sim.execute("UPDATE customer SET email = 'x' WHERE id IN (1, 4)", "commerce")  # both shards
            sim.execute("DELETE FROM customer WHERE id = 2", "commerce")  # delete + tombstone
            wait_for(lambda: caught_up(sim, run), what="the changes delivered")
            wait_for(lambda: scrape(port)[("shardcdc_records_acked_total", ())] == 9, what="9 records acked")
            m = scrape(port)
            assert m[("shardcdc_records_sent_total", ())] == 9
        finally:
            server.stop()
        run.stop()
    assert len(consume_all(kafka_broker.bootstrap, topic, read_committed=exactly_once)) == 9
