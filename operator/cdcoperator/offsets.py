"""``spec.deletionPolicy: DeleteOffsets``: tombstone every offset record of a deleted connector.

Runs once from the delete handler, after the workers' objects are gone. Only clusters the
operator can reach with ``bootstrap.servers`` and the producer overrides are handled: SASL/TLS
credentials live in Secrets the operator deliberately cannot read (least privilege), so for a
secured cluster the records are kept and the returned message says how to remove them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from cdcoperator.model import ConnectorResource

__all__ = ["delete_offsets", "delete_offsets_sync"]


def delete_offsets_sync(cr: ConnectorResource, timeout: float = 30.0) -> str:
    from cdcworker.offsets.keys import parse_offset_record_key
    from cdcworker.offsets.store import OffsetStore

    kafka = cr.spec.kafka
    if kafka.security is not None or kafka.security_protocol != "PLAINTEXT":
        return (f"offsets of {cr.name} in topic {kafka.offsets_topic} were kept: the cluster needs credentials "
                "the operator does not read; delete the records with `shardcdc offsets reset`")
    config: dict[str, Any] = {"bootstrap.servers": kafka.bootstrap_servers}
    with OffsetStore(config, kafka.offsets_topic, timeout=timeout) as store:
        records = store.load()
        mine = []
        for key in records:
            try:
                name, _partition = parse_offset_record_key(key)
            except ValueError:
                continue
            if name == cr.name:
                mine.append(key)
        producer = store._own_producer()
        for key in mine:
            producer.produce(store.topic, key=key, value=None, partition=store.partition_for(key))
        if producer.flush(timeout):
            return f"deleting offsets of {cr.name}: {len(mine)} tombstones not acknowledged within {timeout}s"
    return f"deleted {len(mine)} offset records of {cr.name} from topic {kafka.offsets_topic}"


async def delete_offsets(body: Mapping[str, Any]) -> tuple[bool, str]:
    """(deleted, message for the event)."""
    cr = ConnectorResource.from_body(body)
    try:
        message = await asyncio.to_thread(delete_offsets_sync, cr)
    except Exception as exc:  # the connector is being deleted either way; say what happened
        return False, f"offsets of {cr.name} were not deleted: {exc}"
    return message.startswith("deleted "), message
