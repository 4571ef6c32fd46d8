"""Heartbeat records: exact bytes, throttling, skipping without an offset, low watermark."""

from __future__ import annotations

from cdcworker.events.encoder import OutRecord
from cdcworker.records.heartbeat import HEARTBEAT_PARTITION, HeartbeatEmitter, heartbeat_record

VGTID = '[{"keyspace":"ks","shard":"-80","gtid":"MySQL56/u:1-5","table_p_ks":[]}]'
VGTID_ESC = VGTID.replace('"', '\\"')
KEY_SCHEMA = (
    '{"type":"struct","fields":[{"type":"string","optional":false,"field":"serverName"}],'
    '"optional":false,"name":"io.debezium.connector.common.ServerNameKey","version":1}'
)
VALUE_SCHEMA = (
    '{"type":"struct","fields":[{"type":"string","optional":false,"field":"vgtid"},'
    '{"type":"int64","optional":false,"field":"ts_ms"}],'
    '"optional":false,"name":"io.debezium.connector.vitess.Heartbeat","version":1}'
)


def test_heartbeat_record_bytes() -> None:
    rec = heartbeat_record("__debezium-heartbeat.shop", "shop", VGTID, 1700000000123)
    assert HEARTBEAT_PARTITION == 0
    assert rec == OutRecord(
        "__debezium-heartbeat.shop",
        ('{"schema":' + KEY_SCHEMA + ',"payload":{"serverName":"shop"}}').encode(),
        (
            '{"schema":' + VALUE_SCHEMA + ',"payload":{"vgtid":"' + VGTID_ESC + '","ts_ms":1700000000123}}'
        ).encode(),
        [],
    )
    plain = heartbeat_record("hb", "shop", None, 5, key_schemas_enable=False, value_schemas_enable=False)
    assert (plain.key, plain.value) == (b'{"serverName":"shop"}', b'{"vgtid":"","ts_ms":5}')


def test_low_watermark_field() -> None:
    rec = heartbeat_record("hb", "shop", VGTID, 5, low_watermark=True, low_watermark_ms=4000)
    assert rec.value is not None
    assert rec.value.endswith(
        b'{"type":"int64","optional":true,"field":"low_watermark"}],'
        b'"optional":false,"name":"io.debezium.connector.vitess.Heartbeat","version":1},'
        b'"payload":{"vgtid":"' + VGTID_ESC.encode() + b'","ts_ms":5,"low_watermark":4000}}'
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_emitter_throttles_by_interval_and_skips_without_offset() -> None:
    clock = FakeClock()
    em = HeartbeatEmitter(
        "hb",
        "shop",
        1500,
        key_schemas_enable=False,
        value_schemas_enable=False,
        clock=clock,
        wall_ms=lambda: 77,
    )
    assert em.maybe_emit(VGTID) is None  # the timer starts at construction
    clock.now = 101.4
    assert em.maybe_emit(VGTID) is None
    clock.now = 101.5
    # Due, but no offset yet: nothing is sent and the timer restarts.
    assert em.maybe_emit(None, has_offset=False) is None
    clock.now = 102.9
    assert em.maybe_emit(VGTID) is None
    clock.now = 103.0
    rec = em.maybe_emit(VGTID)
    assert rec is not None and rec.value == b'{"vgtid":"' + VGTID_ESC.encode() + b'","ts_ms":77}'
    assert em.maybe_emit(VGTID) is None
    # A forced beat ignores the timer.
    forced = em.emit(VGTID)
    assert forced is not None and forced.key == b'{"serverName":"shop"}'


def test_emitter_disabled_with_zero_interval() -> None:
    clock = FakeClock()
    em = HeartbeatEmitter("hb", "shop", 0, clock=clock)
    clock.now = 1e9
    assert em.maybe_emit(VGTID) is None
    assert em.emit(VGTID) is None


def test_emitter_low_watermark_with_schemas() -> None:
    clock = FakeClock()
    em = HeartbeatEmitter("hb", "shop", 10, low_watermark=True, clock=clock, wall_ms=lambda: 9)
    clock.now = 200.0
    rec = em.maybe_emit(VGTID, low_watermark_ms=None)
    expected = heartbeat_record("hb", "shop", VGTID, 9, low_watermark=True, low_watermark_ms=None)
    assert rec == expected
    assert (
        rec is not None and rec.value is not None and rec.value.endswith(b'"ts_ms":9,"low_watermark":null}}')
    )
