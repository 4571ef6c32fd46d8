"""Heartbeats wired into the worker: Debezium heartbeat records while idle, the low watermark on
them, offsets that keep up with the source, and ``_vt.heartbeat`` rows as data events."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from test_worker_txmeta import stored_offsets
from worker_fixtures import (
    caught_up,
    commerce_sim,
    running_task,
    wait_for,
    wait_positioned,
    worker_config,
)

from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim

KEY_SCHEMA = (
    b'{"type":"struct","fields":[{"type":"string","optional":false,"field":"serverName"}],"optional":false,'
    b'"name":"io.debezium.connector.common.ServerNameKey","version":1}'
)


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim() as s:
        yield s


def _beats(broker: KafkaBroker, topic: str, read_committed: bool = False) -> list[dict[str, Any]]:
    """The heartbeat payloads so far; none before the first heartbeat creates the topic."""
    try:
        records = consume_all(broker.bootstrap, topic, read_committed=read_committed, timeout=5)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise
        return []
    return [json.loads(r.value or b"")["payload"] for r in records]


def _value_schema(low_watermark: bool) -> bytes:
    extra = b',{"type":"int64","optional":true,"field":"low_watermark"}' if low_watermark else b""
    return (
        b'{"type":"struct","fields":[{"type":"string","optional":false,"field":"vgtid"},'
        b'{"type":"int64","optional":false,"field":"ts_ms"}' + extra + b'],"optional":false,'
        b'"name":"io.debezium.connector.vitess.Heartbeat","version":1}'
    )


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_heartbeats_while_idle_carry_the_position_and_low_watermark(
    sim: VTGateSim, kafka_broker: KafkaBroker, exactly_once: bool
) -> None:
    extra = {"heartbeat.interval.ms": "1000", "shardcdc.heartbeat.low.watermark": "true"}
    if exactly_once:
        extra.update({"exactly.once.support": "required", "poll.interval.ms": "50"})
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra=extra)
    assert cfg.source.heartbeat_interval_seconds == 1  # VTGate is asked for heartbeats too
    topic = f"__debezium-heartbeat.{cfg.topic_prefix}"
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.execute("INSERT INTO customer (id, email) VALUES (1, 'a@x.io')", "commerce")
        wait_for(lambda: caught_up(sim, run), what="insert delivered")
        commit_ms = max(sm.last_commit_ts or 0 for sm in run.task.metrics.shards) * 1000

        def later_beats() -> list[dict[str, Any]]:
            beats = _beats(kafka_broker, topic, exactly_once)
            return [b for b in beats if b["low_watermark"] is not None and b["low_watermark"] >= commit_ms]

        # Idle now: heartbeats keep coming (VTGate's and our own timer) and, once Kafka holds the
        # insert, carry a low watermark at or after its commit.
        wait_for(lambda: len(later_beats()) >= 2, what="two idle heartbeats with the low watermark", timeout=20)
        run.stop()

    records = consume_all(kafka_broker.bootstrap, topic, read_committed=exactly_once)
    assert {r.partition for r in records} == {0}
    position = json.dumps(
        [{"keyspace": "commerce", "shard": s, "gtid": g, "table_p_ks": []} for s, g in sim.positions("commerce").items()],
        separators=(",", ":"),
    )
    last = records[-1]
    assert last.key == b'{"schema":' + KEY_SCHEMA + b',"payload":{"serverName":"' + cfg.topic_prefix.encode() + b'"}}'
    assert last.value is not None
    doc = json.loads(last.value)
    assert last.value.startswith(b'{"schema":' + _value_schema(True) + b',"payload":{"vgtid":')
    assert doc["payload"]["vgtid"] == position
    assert list(doc["payload"]) == ["vgtid", "ts_ms", "low_watermark"]
    assert doc["payload"]["ts_ms"] >= doc["payload"]["low_watermark"] >= commit_ms
    # the stored offset is the head of both shards
    if not exactly_once:
        assert {sg.shard: sg.gtid for sg in stored_offsets(kafka_broker, cfg)[-1].vgtid} == sim.positions("commerce")


def test_idle_position_moves_reach_the_stored_offset(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    """Position-only progress (OTHER events, no rows) is stored while idle, so a restart never
    replays from far back."""
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"heartbeat.interval.ms": "1000"})
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        for _ in range(3):
            sim.other("commerce", "80-")
        wait_for(lambda: caught_up(sim, run), what="OTHER events read")
        def stored_at_head() -> bool:
            offsets = stored_offsets(kafka_broker, cfg)
            return bool(offsets) and {sg.shard: sg.gtid for sg in offsets[-1].vgtid} == sim.positions("commerce")

        wait_for(stored_at_head, what="offset at the head while idle")
        # The first heartbeat is due an interval after the start (Debezium's timer), which a fast
        # run reaches only after the offset is stored.
        topic = f"__debezium-heartbeat.{cfg.topic_prefix}"
        wait_for(lambda: bool(_beats(kafka_broker, topic)), what="a heartbeat while idle")
        run.stop()
    beats = _beats(kafka_broker, topic)
    assert beats and list(beats[-1]) == ["vgtid", "ts_ms"]  # no low watermark field unless enabled


def test_keyspace_heartbeats_stream_the_heartbeat_table(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"vitess.stream.keyspace.heartbeats": "true"})
    topic = f"{cfg.topic_prefix}.commerce.heartbeat"
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        # both shards resolved "current": earlier writes would be before the stream's start
        wait_for(lambda: caught_up(sim, run), what="stream positioned")
        sim.write_heartbeat("commerce")
        sim.write_heartbeat("commerce")
        wait_for(lambda: caught_up(sim, run), what="heartbeat rows read")
        run.stop()
    records = consume_all(kafka_broker.bootstrap, topic)
    payloads = [json.loads(r.value or b"")["payload"] for r in records]
    assert sorted((p["op"], p["source"]["shard"]) for p in payloads) == [
        ("c", "-80"), ("c", "80-"), ("u", "-80"), ("u", "80-")
    ]
    assert {p["source"]["table"] for p in payloads} == {"heartbeat"}
    # VARBINARY: bytes, base64 in JSON
    assert {base64.b64decode(p["after"]["keyspaceShard"]) for p in payloads} == {b"commerce/-80", b"commerce/80-"}


def test_a_throttled_shard_holds_the_low_watermark_back(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    """VTGate's heartbeat only says it sent nothing for a while; a shard whose tablet is throttled
    looks just as idle. Its changes are not in Kafka, so its watermark must not pass them, while
    the other shard's (proven caught up by the idle probe) moves on."""
    import time

    cfg = worker_config(kafka_broker, sim.address, "commerce", extra={"heartbeat.interval.ms": "1000"})
    with running_task(cfg) as run:
        wait_positioned(sim, run)
        sim.throttle("commerce", "80-")
        t_write = float(int(time.time()))  # commit timestamps are whole seconds
        for i in range(1, 11):
            sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
        source = sim.positions("commerce")
        metrics = run.task.metrics
        low, high = metrics.shard("-80"), metrics.shard("80-")

        def proven() -> bool:
            read = {sg.shard: sg.gtid for sg in run.task.processor.position}
            return read["-80"] == source["-80"] and (low.watermark or 0) >= t_write

        wait_for(proven, what="-80's changes acknowledged and the shard proven caught up", timeout=30)
        probes = run.task.idle_probe.probes
        wait_for(lambda: run.task.idle_probe.probes >= probes + 2, what="two more probes while 80- is throttled")
        assert {sg.shard: sg.gtid for sg in run.task.processor.position}["80-"] != source["80-"]
        # Commit times are whole seconds and the watermark says "committed before T": the writes
        # (at t_write or later) are not covered, while VTGate's heartbeats, a second or more
        # after them, would have moved it past t_write.
        assert high.watermark is None or high.watermark <= t_write
        assert metrics.low_watermark() is None or metrics.low_watermark() <= t_write

        sim.throttle("commerce", "80-", on=False)
        wait_for(lambda: caught_up(sim, run), what="80-'s changes after the throttle")
        wait_for(lambda: (high.watermark or 0) > t_write and (metrics.low_watermark() or 0) > t_write,
                 what="the low watermark past the writes")
        assert run.stop().exit_code == 0
