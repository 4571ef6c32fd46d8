"""Stored offsets that vanished, from the operator's side: the ``OffsetsLost`` condition and its fixes.

Issue 28, case 7. A task whose offsets record was tombstoned or deleted after it had streamed must
not silently copy everything again. The operator knows which tasks stored positions (their
``/status`` reported them; ``status.assignment.taskStates[].position`` keeps the last ones, also
while the worker is down) and tells each worker through the ConfigMap ``<name>-positions``: key
``task-<generation>-<id>`` = ``true``, read into ``shardcdc.task.offsets.expected`` by an optional
``configMapKeyRef`` env var, so setting it never restarts a task. A worker that then finds no
stored position stops with ``reason: OffsetsLost`` in its termination message
(``cdcworker.offsets.lost``), and this module turns that into the ``OffsetsLost`` condition with the
last known positions, until the user annotates the connector:

* ``shardcdc.io/offsets-lost=restore``: those positions are written back to the offsets topic under
  the lost tasks' keys, and the tasks restarted: they resume where they were;
* ``shardcdc.io/offsets-lost=resnapshot``: the tasks' flags are cleared and the tasks restarted: they
  start over as ``snapshot.mode`` says.

The annotation is removed afterwards, whatever the outcome (an event says what was done).
A generation record cleared by an offsets reset clears every flag (nothing is expected any more).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdcoperator import conditions as cond
from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, ClusterApi
from cdcoperator.kafkaaccess import kafka_access
from cdcoperator.model import ConnectorResource
from cdcoperator.planner import Event, Generation
from cdcoperator.taskstatus import PodSummary
from cdcworker.config.loader import property_to_env
from cdcworker.jsontypes import JsonMapping, JsonObject
from cdcworker.offsets import OffsetPartition, Vgtid
from cdcworker.offsets.keys import task_key_name
from cdcworker.offsets.lost import LOST_ANNOTATION, REASON
from cdcworker.offsets.value import OffsetValue

if TYPE_CHECKING:
    from cdcoperator.kafkaaccess import KafkaAccess

__all__ = [
    "EXPECTED_ENV", "LOST_ANNOTATION", "REASON", "LostTasks", "expected_env_var", "kept_positions", "lost_tasks",
    "parse_positions", "positions_config_map_name", "restore_records", "settle_offsets_lost",
]

EXPECTED_PROPERTY = "shardcdc.task.offsets.expected"
EXPECTED_ENV = property_to_env(EXPECTED_PROPERTY)
POSITIONS_OF_LABEL = f"{naming.PREFIX}/positions-of"
RESTORED_AT_ANNOTATION = f"{naming.PREFIX}/offsets-lost-handled-at"
CHOICES = ("restore", "resnapshot")
KAFKA_TIMEOUT = 30.0


def positions_config_map_name(connector: str) -> str:
    return f"{connector}-positions"


def expected_key(generation: int, task_id: int) -> str:
    return f"task-{generation}-{task_id}"


def expected_env_var(connector: str, generation: int, task_id: int) -> JsonObject:
    """The worker container's env entry: the task's flag, read at each container start (optional:
    absent means not expected), so the operator can set it without rolling the Deployment."""
    return {"name": EXPECTED_ENV, "valueFrom": {"configMapKeyRef": {
        "name": positions_config_map_name(connector), "key": expected_key(generation, task_id), "optional": True}}}


def _termination(pod: PodSummary) -> JsonMapping:
    import json

    try:
        doc = json.loads(pod.termination_message or "null")
    except ValueError:
        return {}
    return doc if isinstance(doc, Mapping) else {}


def lost_tasks(pods: Iterable[PodSummary], generation: int) -> tuple[int, ...]:
    """Task ids of ``generation`` whose worker stopped with OffsetsLost and has not recovered (pure)."""
    return tuple(sorted({p.task for p in pods if p.generation == generation and not p.ready and not p.deleting
                         and _termination(p).get("reason") == REASON}))


def kept_positions(existing_status: JsonMapping, generation: int) -> dict[int, str]:
    """Each task's last reported position (``shard@gtid;...``) in ``status`` for ``generation``: kept
    while its worker cannot report one, so the OffsetsLost condition and ``restore`` have it."""
    assignment = existing_status.get("assignment") or {}
    if assignment.get("generation") != generation:
        return {}
    return {int(t["id"]): str(t["position"]) for t in assignment.get("taskStates") or () if t.get("position")}


def parse_positions(text: str) -> list[tuple[str, str]]:
    """``-80@MySQL56/u:1-5;80-@...`` -> [(shard, gtid)...] (the status's ``position`` format)."""
    out = []
    for part in filter(None, text.split(";")):
        shard, sep, gtid = part.partition("@")
        if not sep or not gtid:
            raise ValueError(f"position {part!r} is not <shard>@<gtid>")
        out.append((shard, gtid))
    return out


def restore_records(cr: ConnectorResource, g: Generation, positions: Mapping[int, str]
                    ) -> list[tuple[OffsetPartition, OffsetValue]]:
    """The offsets records that put each task of ``positions`` back where it was (pure)."""
    server, keyspace = cr.spec.kafka.topic_prefix, cr.spec.source.keyspace
    return [(OffsetPartition.for_task(server, tid, g.task_count, g.generation),
             OffsetValue.build(Vgtid.of(keyspace, parse_positions(text))))
            for tid, text in sorted(positions.items())]


@dataclass(frozen=True, slots=True)
class LostTasks:
    """What this reconcile found: the condition to add and the warning to emit (None: all well)."""

    condition: tuple[cond.ConditionSpec, ...] = ()
    event: Event | None = None


def _message(cr: ConnectorResource, g: Generation, lost: Sequence[int], known: Mapping[int, str]) -> str:
    where = "; ".join(f"task {t} (key {task_key_name(t, g.task_count, g.generation)}): {known.get(t) or 'none known'}" for t in lost)
    return (f"the stored offsets of generation {g.generation} are gone from topic {cr.spec.kafka.offsets_topic!r} "
            f"(tombstoned or deleted) although the tasks had stored positions; the tasks wait instead of copying "
            f"everything again. Last known positions: {where}. Fix: `kubectl annotate cdc/{cr.name} "
            f"{LOST_ANNOTATION}=restore` writes them back, `{LOST_ANNOTATION}=resnapshot` starts over as "
            f"snapshot.mode says")


async def _positions_map(kube: ClusterApi, namespace: str, connector: str) -> JsonObject | None:
    found = await kube.list_labelled(CONFIG_MAPS, namespace, f"{POSITIONS_OF_LABEL}={connector}")
    return found[0] if found else None


async def _write_flags(kube: ClusterApi, body: JsonMapping, live: JsonMapping | None,
                       data: Mapping[str, str]) -> None:
    from cdcoperator.objects import owner_reference

    unchanged = dict((live or {}).get("data") or {}) == dict(data)
    if unchanged and (live is not None or not data):
        return
    meta = body["metadata"]
    await kube.apply({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": positions_config_map_name(meta["name"]), "namespace": meta["namespace"],
                     "labels": {POSITIONS_OF_LABEL: meta["name"], naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
                     "ownerReferences": [owner_reference(ConnectorResource.from_body(body))]},
        "data": dict(data),
    }, live)


def _wanted_flags(old: Mapping[str, str], g: Generation | None, reporting: Iterable[int], drop: Iterable[int]
                  ) -> dict[str, str]:
    """Flags of the current generation only (none without a generation record: after a reset)."""
    if g is None:
        return {}
    prefix = f"task-{g.generation}-"
    flags = {k: v for k, v in old.items() if k.startswith(prefix)}
    flags.update({expected_key(g.generation, t): "true" for t in reporting})
    for t in drop:
        flags.pop(expected_key(g.generation, t), None)
    return flags


async def settle_offsets_lost(kube: ClusterApi, emit: object, body: JsonMapping, cr: ConnectorResource,
                              g: Generation | None, pods: Sequence[PodSummary], reporting: Iterable[int],
                              now_stamp: str) -> LostTasks:
    """One reconcile's share: keep the flags, act on the annotation, report lost tasks.

    ``reporting``: tasks of ``g`` whose worker reports a position now (their flag is set)."""
    meta = body.get("metadata") or {}
    live = await _positions_map(kube, cr.namespace, cr.name)
    old = dict((live or {}).get("data") or {})
    lost = lost_tasks(pods, g.generation) if g is not None else ()
    known = kept_positions(body.get("status") or {}, g.generation) if g is not None else {}
    choice = str((meta.get("annotations") or {}).get(LOST_ANNOTATION, ""))
    drop: tuple[int, ...] = ()
    restart: tuple[int, ...] = ()
    if choice:
        drop, restart = await _handle_choice(kube, emit, body, cr, g, lost, known, choice)
    await _write_flags(kube, body, live, _wanted_flags(old, g, reporting, drop))
    if restart and g is not None:  # after the flags: a restarted worker reads them at its start
        await _restart_tasks(kube, cr, g, restart, now_stamp)
    if not lost or g is None or choice:
        return LostTasks()
    message = _message(cr, g, lost, known)
    return LostTasks((cond.ConditionSpec(cond.READY, False, REASON, message),
                      cond.ConditionSpec(cond.DEGRADED, True, REASON, message)), Event("Warning", REASON, message))


async def _handle_choice(kube: ClusterApi, emit: Any, body: JsonMapping, cr: ConnectorResource,  # Any: kopf's event-posting callable (untyped)
                         g: Generation | None, lost: Sequence[int], known: Mapping[int, str], choice: str
                         ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Carry out ``restore`` or ``resnapshot`` for the lost tasks, then remove the annotation;
    returns (the tasks whose flag to clear, the tasks to restart)."""
    request = choice.strip().lower()
    drop: tuple[int, ...] = ()
    restart: tuple[int, ...] = ()
    if request not in CHOICES:
        emit(body, "Warning", "OffsetsLostRefused", f"{LOST_ANNOTATION}={choice!r} is not one of {', '.join(CHOICES)}")
    elif g is None or not lost:
        emit(body, "Warning", "OffsetsLostRefused", f"{LOST_ANNOTATION}={request}: no task is stopped with {REASON}")
    elif request == "restore":
        missing = [t for t in lost if t not in known]
        try:
            if missing:
                raise ValueError(f"no known position for task(s) {', '.join(map(str, missing))}; use resnapshot")
            records = restore_records(cr, g, {t: known[t] for t in lost})
            await asyncio.to_thread(_write_records, cr, await kafka_access(cr, kube.read_secret), records)
        except Exception as exc:  # Kafka, a bad position: say so on the connector, the annotation goes
            emit(body, "Warning", "OffsetsLostRefused", f"{LOST_ANNOTATION}=restore failed: {exc}")
        else:
            restart = tuple(lost)
            written = "; ".join(f"{partition.task_key}: {known[t]}" for (partition, _), t in
                                zip(records, lost, strict=True))
            emit(body, "Normal", "OffsetsRestored", f"wrote back the last known positions: {written}")
    else:
        drop = restart = tuple(lost)
        emit(body, "Normal", "OffsetsResnapshot", f"task(s) {', '.join(map(str, lost))} start over as snapshot.mode "
             f"says ({cr.spec.snapshot.mode})")
    await kube.remove_annotation(cr.namespace, cr.name, LOST_ANNOTATION, choice)
    return drop, restart


def _write_records(cr: ConnectorResource, access: KafkaAccess, records: Sequence[tuple[OffsetPartition, OffsetValue]]) -> None:
    from cdcworker.offsets.store import OffsetStore

    if access.config is None:
        raise ValueError(access.problem)
    config = cr.spec.config  # the whole topic may be gone: made again as the workers would make it
    with OffsetStore(access.config, cr.spec.kafka.offsets_topic, timeout=KAFKA_TIMEOUT,
                     partitions=int(config.get("offset.storage.partitions", 25)),
                     replication_factor=int(config.get("offset.storage.replication.factor", 3))) as store:
        store.ensure_topic()
        for partition, value in records:
            store.write(cr.name, partition, value)


async def _restart_tasks(kube: ClusterApi, cr: ConnectorResource, g: Generation, tasks: Iterable[int],
                         stamp: str) -> None:
    for tid in tasks:
        await kube.annotate_pod_template(cr.namespace, naming.task_object_name(cr.name, g.generation, tid),
                                         RESTORED_AT_ANNOTATION, stamp)
