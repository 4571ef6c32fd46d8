"""Offset partitions and the exact bytes of their key in the Kafka Connect offsets topic.

Connect's ``OffsetStorageWriter`` serializes ``[<connector name>, <partition map>]`` with the
internal ``JsonConverter`` (``schemas.enable=false``), and ``OffsetStorageReader`` finds offsets by
comparing those bytes. Debezium's ``VitessPartition`` builds the map with ``Collect.hashMapOf`` (a
``java.util.HashMap``), whose iteration puts ``server`` before ``task_key``::

    ["my-connector",{"server":"prefix"}]
    ["my-connector",{"server":"prefix","task_key":"task0_2_1"}]
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from cdcworker.jsontypes import JsonObject
from cdcworker.offsets.javacompat import jackson_bytes, ordered_map

__all__ = [
    "SERVER_KEY",
    "TASK_KEY",
    "OffsetPartition",
    "TaskKey",
    "offset_record_key",
    "parse_offset_record_key",
    "partition_from_map",
    "task_key_name",
]

SERVER_KEY = "server"
TASK_KEY = "task_key"

_TASK_KEY_RE = re.compile(r"task(-?\d+)_(-?\d+)_(-?\d+)")


def task_key_name(task_id: int, task_count: int, gen: int) -> str:
    """Debezium's ``String.format("task%d_%d_%d", tid, numTasks, gen)``."""
    return f"task{task_id}_{task_count}_{gen}"


@dataclass(frozen=True, slots=True)
class TaskKey:
    """A per-task key ``task<i>_<n>_<gen>`` split into its parts."""

    task_id: int
    task_count: int
    gen: int

    def __str__(self) -> str:
        return task_key_name(self.task_id, self.task_count, self.gen)

    @classmethod
    def parse(cls, text: str) -> TaskKey:
        m = _TASK_KEY_RE.fullmatch(text)
        if m is None:
            raise ValueError(f"not a task key (task<i>_<n>_<gen>): {text!r}")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)))


@dataclass(frozen=True, slots=True)
class OffsetPartition:
    """Debezium's ``VitessPartition``: the server (``topic.prefix``) and, per task, the task key."""

    server: str
    task_key: str | None = None

    @classmethod
    def for_task(cls, server: str, task_id: int, task_count: int, gen: int) -> OffsetPartition:
        return cls(server, task_key_name(task_id, task_count, gen))

    def as_map(self) -> JsonObject:
        """The source partition map, in Java ``HashMap`` iteration order."""
        if self.task_key is None:
            return {SERVER_KEY: self.server}
        return ordered_map([(SERVER_KEY, self.server), (TASK_KEY, self.task_key)])

    def __str__(self) -> str:
        # VitessPartition.toString: "VitessPartition [sourcePartition={server=x, task_key=y}]"
        inner = ", ".join(f"{k}={v}" for k, v in self.as_map().items())
        return f"VitessPartition [sourcePartition={{{inner}}}]"


def offset_record_key(connector_name: str, partition: OffsetPartition) -> bytes:
    """The offsets-topic record key Connect writes for this connector and partition."""
    return jackson_bytes([connector_name, partition.as_map()])


def parse_offset_record_key(data: bytes) -> tuple[str, JsonObject]:
    """Split an offsets-topic key into (connector name, partition map); ValueError if malformed."""
    try:
        parsed = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"offset key is not JSON: {data[:200]!r}") from exc
    if (
        not isinstance(parsed, list)
        or len(parsed) != 2
        or not isinstance(parsed[0], str)
        or not isinstance(parsed[1], dict)
    ):
        raise ValueError(f"offset key is not [name, {{partition}}]: {data[:200]!r}")
    return parsed[0], parsed[1]


def partition_from_map(partition: JsonObject) -> OffsetPartition | None:
    """The ``VitessPartition`` a partition map denotes, or None if it is not one."""
    server = partition.get(SERVER_KEY)
    if not isinstance(server, str):
        return None
    extra = set(partition) - {SERVER_KEY, TASK_KEY}
    task_key = partition.get(TASK_KEY)
    if extra or (task_key is not None and not isinstance(task_key, str)):
        return None
    return OffsetPartition(server, task_key)
