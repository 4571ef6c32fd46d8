"""``__debezium.context.*`` headers and the run id, as Debezium 3.5's ``DebeziumHeaderProducer`` writes them."""

from __future__ import annotations

import uuid

from cdcworker.events.encoder import CONNECTOR_PLUGIN_NAME, context_headers, new_run_id


def test_headers_in_debezium_order_with_plugin_name_and_run_id() -> None:
    run_id = "019a2b3c-4d5e-7f60-8123-456789abcdef"
    assert context_headers("shop", "task0_2_1", run_id=run_id) == [
        ("__debezium.context.connectorLogicalName", b"shop"),
        ("__debezium.context.taskId", b"task0_2_1"),
        ("__debezium.context.connectorName", b"vitess"),
        ("__debezium.context.runId", run_id.encode()),
    ]
    assert CONNECTOR_PLUGIN_NAME == "vitess"


def test_run_id_is_a_version7_uuid_with_the_millisecond_clock() -> None:
    """UUIDUtils.generateNewUUID: (ms << 16) | 0x7000 | rand12, then variant 10 + 62 random bits."""
    ms = 1_767_225_600_123  # 2026-01-01T00:00:00.123Z
    a, b = new_run_id(ms), new_run_id(ms)
    for text in (a, b):
        u = uuid.UUID(text)
        assert str(u) == text  # lower-case 8-4-4-4-12, as java.util.UUID.toString
        assert u.version == 7
        assert u.variant == uuid.RFC_4122
        assert u.int >> 80 == ms
    assert a != b  # random parts
    assert text.startswith(f"{ms >> 16:08x}-{ms & 0xFFFF:04x}-7")
