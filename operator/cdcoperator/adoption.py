"""Adopting offsets that exist before a connector's first generation (pure).

A CdcConnector that has no ``status.assignment`` yet may still have offsets: a Debezium Vitess
connector of the same name ran before (migration), or the CdcConnector was deleted with
``deletionPolicy: Retain`` and created again. Starting at generation 0 would ignore per-task
records of any later generation and re-snapshot. So before the first generation, reconcile
scans the offsets topic once (an injectable function, like shard discovery) and this module
reads the connector's records for its server (``topic.prefix``):

* per-task records ``task<i>_<n>_<gen>``: the first generation is ``gen + 1`` for the highest
  ``gen`` found, with ``previousTasks`` = that generation's ``n``; every worker then resumes its
  shards from generation ``gen``'s records (Debezium's previous-generation lookup);
* only the plain ``{"server": ...}`` record (Debezium without per-task offsets): generation 0,
  whose task keys fall back to that record (``cdcworker.offsets.migration.read_generation``);
* nothing: generation 0 starts as ``snapshot.mode`` says.

The result is persisted as ``status.adoptedOffsets`` (the scan happens once) and reported in an
``AdoptedOffsets`` event.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cdcoperator.kafkaaccess import KafkaAccess, plain_access
from cdcoperator.model import ConnectorResource
from cdcworker import kafkaclients
from cdcworker.kafkaerrors import first_refusal
from cdcworker.offsets.edits import OffsetEntry, entries
from cdcworker.offsets.migration import java_sorted
from cdcworker.offsets.store import OffsetStore, OffsetStoreError

__all__ = [
    "Adoption",
    "OffsetScanError",
    "adoption_from_status",
    "adoption_to_status",
    "analyze",
    "chain_from_status",
    "chain_to_status",
    "scan_offsets",
]


@dataclass(frozen=True, slots=True)
class Adoption:
    """What the offsets topic held for this connector before its first generation."""

    generation: int = -1  # highest per-task generation found; -1: none
    tasks: int = 0  # that generation's task count (the <n> of task<i>_<n>_<gen>)
    keys: tuple[str, ...] = ()  # that generation's task keys found, by task id
    server_key: bool = False  # a plain {"server": ...} record exists
    shards: tuple[str, ...] = ()  # shards of the keyspace the adopted records hold positions for
    skipped: str = ""  # why the topic was not scanned (a cluster the operator cannot read)
    # Every generation with records, newest first: (generation, task count). The first generation's
    # workers walk it for shards whose newest task never stored an offset (``shardcdc.task.history``).
    chain: tuple[tuple[int, int], ...] = ()

    @property
    def per_task(self) -> bool:
        return self.generation >= 0

    @property
    def found(self) -> bool:
        return self.per_task or self.server_key

    @property
    def complete(self) -> bool:
        """Every key ``task<i>_<n>_<gen>``, i < n, exists (the workers require them all)."""
        return not self.per_task or len(self.keys) == self.tasks

    @property
    def first_generation(self) -> int:
        return self.generation + 1 if self.per_task else 0

    @property
    def previous_tasks(self) -> int:
        return self.tasks if self.per_task else -1

    def describe(self, server: str) -> str:
        """The ``AdoptedOffsets`` event's message."""
        if self.skipped:
            return f"offsets were not scanned: {self.skipped}; generation 0 starts from the plain server key, if any"
        on = f" for shards {', '.join(self.shards)}" if self.shards else ""
        if self.per_task:
            gaps = "" if self.complete else f" (incomplete: {self.tasks} keys expected)"
            return (f"found per-task offsets of generation {self.generation} with {self.tasks} tasks "
                    f"({', '.join(self.keys)}){gaps}{on}; starting at generation {self.first_generation} with "
                    f"previous tasks {self.tasks}, so every shard resumes from them")
        if self.server_key:
            return (f'found the offset {{"server": "{server}"}}{on}; generation 0 resumes from it')
        return "no offsets of this connector found; generation 0 starts as snapshot.mode says"


def _shards(items: list[OffsetEntry], keyspace: str) -> tuple[str, ...]:
    return tuple(java_sorted({sg.shard for e in items for sg in e.positions() if sg.keyspace == keyspace}))


def analyze(records: Mapping[bytes, bytes], connector: str, server: str, keyspace: str) -> Adoption:
    """The adoption for ``connector``'s records of ``server`` in an offsets topic's records (key -> value)."""
    mine = [e for e in entries(records, connector) if e.partition.server == server]
    plain = [e for e in mine if e.partition.task_key is None]
    by_gen: dict[int, dict[int, list[OffsetEntry]]] = {}
    for e in mine:
        tk = e.task_key
        if tk is not None and tk.gen >= 0 and 0 <= tk.task_id < tk.task_count:
            by_gen.setdefault(tk.gen, {}).setdefault(tk.task_count, []).append(e)
    if not by_gen:
        return Adoption(server_key=bool(plain), shards=_shards(plain, keyspace))
    # One task count per generation in practice; if a generation was started twice with different
    # counts, the one with the most keys (then the larger count) is the one that ran.
    ran = {g: max(counts.items(), key=lambda kv: (len(kv[1]), kv[0])) for g, counts in by_gen.items()}
    gen = max(by_gen)
    tasks, items = ran[gen]
    items = sorted(items, key=lambda e: e.task_key.task_id if e.task_key else 0)
    return Adoption(
        chain=tuple((g, ran[g][0]) for g in sorted(ran, reverse=True)),
        generation=gen,
        tasks=tasks,
        keys=tuple(str(e.partition.task_key) for e in items),
        server_key=bool(plain),
        shards=_shards(items, keyspace),
    )


def adoption_to_status(a: Adoption) -> dict[str, object]:
    out: dict[str, object] = {"generation": a.generation, "tasks": a.tasks, "keys": list(a.keys),
                              "serverKey": a.server_key, "shards": list(a.shards)}
    if a.skipped:
        out["skipped"] = a.skipped
    if a.chain:
        out["chain"] = chain_to_status(a.chain)
    return out


def adoption_from_status(raw: Mapping[str, object] | None) -> Adoption | None:
    """The recorded adoption (None: no scan recorded yet)."""
    if not raw:
        return None
    keys = raw.get("keys") or []
    shards = raw.get("shards") or []
    assert isinstance(keys, list) and isinstance(shards, list)
    return Adoption(
        generation=int(str(raw.get("generation", -1))),
        tasks=int(str(raw.get("tasks", 0))),
        keys=tuple(str(k) for k in keys),
        server_key=bool(raw.get("serverKey", False)),
        shards=tuple(str(s) for s in shards),
        skipped=str(raw.get("skipped") or ""),
        chain=chain_from_status(raw.get("chain")),
    )


def chain_to_status(chain: Iterable[tuple[int, int]]) -> list[dict[str, int]]:
    """A generation chain (``status.assignment.history``, ``status.adoptedOffsets.chain``)."""
    return [{"generation": gen, "tasks": tasks} for gen, tasks in chain]


def chain_from_status(items: object) -> tuple[tuple[int, int], ...]:
    """A recorded generation chain; an unreadable one (edited by hand) counts as none, so the
    workers fall back to Debezium's rule rather than to a wrong chain."""
    try:
        return tuple((int(i["generation"]), int(i["tasks"])) for i in items or ())  # type: ignore[attr-defined]
    except (KeyError, TypeError, ValueError):
        return ()


# --- the scan (I/O; reconcile calls it through ReconcileContext.scan_offsets) -------------------------

SCAN_TIMEOUT = 15.0


class OffsetScanError(RuntimeError):
    """The offsets topic could not be read (the message is user-facing: it lands in a condition)."""


def scan_offsets(cr: ConnectorResource, timeout: float = SCAN_TIMEOUT, access: KafkaAccess | None = None) -> Adoption:
    """Read the connector's offsets topic and analyze it (blocking; run it in a thread). ``access``:
    the cluster's client settings (``kafkaaccess``; default: those that need no Secret)."""
    from confluent_kafka import KafkaError, KafkaException

    access = access or plain_access(cr)
    if access.config is None:
        return Adoption(skipped=access.problem or "")
    kafka = cr.spec.kafka
    config = dict(access.config)
    try:
        # Every topic's metadata, not this topic's: asking for one topic by name makes a broker with
        # auto.create.topics.enable create it (delete policy, not compact), which breaks the workers.
        meta = _all_topics(config, timeout).topics.get(kafka.offsets_topic)
        if meta is None or (meta.error is not None and meta.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
            records: Mapping[bytes, bytes] = {}  # no offsets topic yet: nothing to adopt
        elif meta.error is not None:
            raise OffsetScanError(f"offsets topic {kafka.offsets_topic}: {meta.error}")
        else:
            records = OffsetStore(config, kafka.offsets_topic, timeout=timeout).load()
    except (KafkaException, OffsetStoreError) as exc:
        raise OffsetScanError(f"reading offsets topic {kafka.offsets_topic} at {kafka.bootstrap_servers}: "
                              f"{exc}") from exc
    return analyze(records, cr.name, kafka.topic_prefix, cr.spec.source.keyspace)


def _all_topics(config: Mapping[str, object], timeout: float) -> Any:  # Any: confluent-kafka's ClusterMetadata (untyped in its stubs)
    """The cluster's topic metadata, asked in short rounds so that a refused login or certificate
    stops the scan at once with what to fix (librdkafka itself would report only a transport
    failure at the deadline, the reason being in its log)."""
    from confluent_kafka import KafkaException

    client = "operator's offsets reader"
    errors: list[Any] = []  # Any: KafkaError objects as librdkafka's error_cb passes them
    admin = kafkaclients.admin(config, client, errors)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin.list_topics(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        except KafkaException:
            admin.poll(0)  # serves error_cb and the log
            refused = first_refusal(errors, client)
            if refused is not None:
                raise refused from None
            if time.monotonic() >= deadline:
                raise
