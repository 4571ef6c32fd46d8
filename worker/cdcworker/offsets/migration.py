"""Offset-storage-per-task generations: where each shard starts, as Debezium decides it (pure).

Two entry points, mirroring Debezium's two steps:

* ``plan_tasks`` (the operator; Debezium's ``VitessConnector.taskConfigs``): pick the shard set,
  check that no shard position would be lost, deal the shards round-robin over the tasks and give
  each task its starting VGTID.
* ``resolve_task_start`` (the worker; ``VitessConnectorTask.getConfigWithOffsets`` plus the
  task's own stored offset): the VGTID one task resumes from.

Per shard the start is, in order of preference (reference §2):

1. the task's own stored offset, if its key already has one (it wins as a whole);
2. the current generation: the union over keys ``task<i>_<n>_<gen>`` (missing keys allowed);
3. the previous generation: keys ``task<i>_<prev.num.tasks>_<gen-1>``, every one of which must
   exist, else ``MissingOffsetsError`` naming all missing keys;
4. the configured start (``vitess.vgtid``: ``current``, ``""`` or a VGTID JSON).

For generation 0 a task key without an offset falls back to the plain ``{"server": ...}``
partition, so offsets written without per-task mode count as generation 0.

Deliberate differences from Debezium (both make a migration lose less, never more):

* ``table_p_ks`` is carried over. Debezium rebuilds each shard as ``(keyspace, shard, gtid)``, so
  a copy interrupted by a generation change restarts from scratch. Keeping the copy state is safe
  because a ``ShardGtid`` is self-contained: VStream resumes a shard's copy from that shard's
  gtid and ``lastpk`` alone, independent of which task or VGTID holds it, and every shard is
  assigned to exactly one task of a generation.
* The previous generation's keys are only required while they can still matter: in
  ``plan_tasks`` while some key of the current generation has no offset, in
  ``resolve_task_start`` while some shard of the task is not covered by its own offset or the
  current generation. Debezium requires them on every start, so tombstoning them after a
  completed migration breaks it, although their content can no longer be used.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cdcworker.offsets.javacompat import java_string_sort_key
from cdcworker.offsets.keys import OffsetPartition, offset_record_key, task_key_name
from cdcworker.offsets.value import OffsetValue
from cdcworker.offsets.vgtid import CURRENT_GTID, EMPTY_GTID, ShardGtid, Vgtid

__all__ = [
    "GenerationOffsets",
    "MigrationError",
    "MissingOffsetsError",
    "OffsetLookup",
    "SameGenerationError",
    "ShardLossError",
    "StoredOffsetError",
    "TaskAssignment",
    "TaskStart",
    "assign_shards",
    "configured_start",
    "java_sorted",
    "lookup_in",
    "plan_tasks",
    "read_generation",
    "read_stored",
    "resolve_task_start",
]

OffsetLookup = Callable[[OffsetPartition], OffsetValue | None]
"""Returns the stored offset of a partition (for one connector name), or None."""


class MigrationError(ValueError):
    """The stored offsets and the task configuration do not allow a safe start."""


class MissingOffsetsError(MigrationError):
    """Keys of the previous generation (or of a current generation that must be complete) are missing."""

    def __init__(self, message: str, missing: Sequence[OffsetPartition]) -> None:
        super().__init__(message)
        self.missing = list(missing)


class ShardLossError(MigrationError):
    """Continuing would drop the stored position of at least one shard."""


class SameGenerationError(MigrationError):
    """A new generation with the same task count and shards as the previous one (Debezium refuses it)."""


class StoredOffsetError(MigrationError):
    """A stored offset of the connector cannot be read (not JSON, cut short, a field of the wrong
    shape): the task cannot know where it was, so it stops with the key, the problem and the fix."""

    def __init__(self, connector_name: str, key: bytes, problem: str) -> None:
        super().__init__(
            f"the stored offset under key {key.decode('utf-8', 'replace')} is unreadable: {problem}. Fix: stop the "
            f"connector, then write a good position with `shardcdc offsets set {connector_name} --offsets-file FILE` "
            f"(`shardcdc offsets list {connector_name} --json` shows the others), or delete its offsets with "
            f"`shardcdc offsets reset {connector_name}` (the next start begins as snapshot.mode says)")
        self.key = key
        self.problem = problem


def read_stored(connector_name: str, key: bytes, data: bytes) -> OffsetValue:
    """A stored offset value whose ``vgtid`` is readable (``StoredOffsetError`` otherwise)."""
    try:
        value = OffsetValue.from_bytes(data)
        value.vgtid  # noqa: B018  (reads and checks it)
    except ValueError as exc:
        raise StoredOffsetError(connector_name, key, str(exc)) from None
    return value


def lookup_in(records: Mapping[bytes, bytes], connector_name: str) -> OffsetLookup:
    """An ``OffsetLookup`` over offsets-topic records (key bytes -> value bytes), e.g. ``OffsetStore.records``.
    A stored value that cannot be read is a ``StoredOffsetError``."""

    def lookup(partition: OffsetPartition) -> OffsetValue | None:
        key = offset_record_key(connector_name, partition)
        data = records.get(key)
        return None if data is None else read_stored(connector_name, key, data)

    return lookup


def java_sorted(shards: Iterable[str]) -> list[str]:
    """Shards in Java natural ``String`` order (``-40 < 40-80 < 80-c0 < c0-``), as Debezium sorts them."""
    return sorted(shards, key=java_string_sort_key)


def assign_shards(shards: Iterable[str], tasks_max: int) -> list[list[str]]:
    """Deal sorted shards round-robin: shard i goes to task ``i % min(tasks_max, len(shards))``.

    Only tasks that receive shards are returned, so the task count is ``len(result)``; it is also
    the ``<n>`` of the task keys and the next generation's ``prev.num.tasks``.
    """
    if tasks_max < 1:
        raise ValueError(f"tasks.max must be at least 1, got {tasks_max}")
    ordered = java_sorted(set(shards))
    tasks = min(tasks_max, len(ordered))
    out: list[list[str]] = [[] for _ in range(tasks)]
    for i, shard in enumerate(ordered):
        out[i % tasks].append(shard)
    return out


def configured_start(keyspace: str, shards: Iterable[str], vgtid_setting: str) -> dict[str, ShardGtid]:
    """Per-shard starting positions from ``vitess.vgtid`` (``current``, ``""`` or VGTID JSON).

    The caller passes ``""`` when ``snapshot.mode`` asks for an initial copy and no explicit
    ``vitess.vgtid`` is set. A JSON VGTID must name every shard (matched by name).
    """
    shards = list(shards)
    if vgtid_setting in (CURRENT_GTID, EMPTY_GTID):
        return {s: ShardGtid(keyspace, s, vgtid_setting) for s in shards}
    given = {sg.shard: sg for sg in Vgtid.from_json(vgtid_setting)}
    missing = [s for s in shards if s not in given]
    if missing:
        raise MigrationError(
            f"vitess.vgtid has no position for shard(s) {java_sorted(missing)}; "
            f"it names {java_sorted(given)}. Give a gtid for every shard, or use 'current' or ''."
        )
    return {s: given[s] for s in shards}


@dataclass(frozen=True, slots=True)
class GenerationOffsets:
    """What one generation's keys hold: positions per shard and which keys had no offset."""

    positions: dict[str, ShardGtid]
    missing: list[OffsetPartition] = field(default_factory=list)
    values: dict[str, OffsetValue] = field(default_factory=dict)  # shard -> the offset value holding it


def read_generation(
    lookup: OffsetLookup,
    server: str,
    task_count: int,
    gen: int,
    *,
    require_all: bool,
) -> GenerationOffsets | None:
    """Union of the positions under keys ``task<i>_<task_count>_<gen>`` (Debezium's ``VitessOffsetRetriever``).

    Returns None for ``gen < 0`` (no generation). For ``gen == 0`` a key without an offset falls
    back to the plain server partition. With ``require_all`` every key must exist, else
    ``MissingOffsetsError`` naming all missing keys. A later task's position for a shard
    overwrites an earlier one (Java ``putAll``).
    """
    if gen < 0:
        return None
    positions: dict[str, ShardGtid] = {}
    values: dict[str, OffsetValue] = {}
    missing: list[OffsetPartition] = []
    server_only = OffsetPartition(server)
    for i in range(task_count):
        partition = OffsetPartition.for_task(server, i, task_count, gen)
        offset = lookup(partition)
        if offset is None and gen == 0:
            offset = lookup(server_only)
        if offset is None:
            missing.append(partition)
            continue
        try:
            vgtid = offset.vgtid
        except ValueError as exc:
            raise MigrationError(f"stored offset for {partition} is unreadable: {exc}") from exc
        for sg in vgtid:
            positions[sg.shard] = sg
            values[sg.shard] = offset
    if missing and require_all:
        fallback = f" (nor for {server_only})" if gen == 0 else ""
        names = ", ".join(str(p) + fallback for p in missing)
        raise MissingOffsetsError(
            f"No offset found for {names}. Generation {gen} with {task_count} task(s) must have stored an "
            f"offset under every key task<i>_{task_count}_{gen}; check vitess.prev.num.tasks (the number of "
            f"tasks that actually ran, at most the shard count) and vitess.offset.storage.task.key.gen.",
            missing,
        )
    return GenerationOffsets(positions, missing, values)


def _read_chain(
    lookup: OffsetLookup, server: str, chain: Sequence[tuple[int, int]], shards: set[str]
) -> tuple[GenerationOffsets, dict[str, int]]:
    """Positions of ``shards`` from the newest generation of ``chain`` that holds each one, and
    that generation per shard.

    ``chain`` is the operator's record of the generations before this one, newest first, so a
    missing key only means a task that never stored an offset (its pod was never scheduled): it
    never moved its shards, and they are where an older generation had them. The walk stops at a
    complete generation (every key present: a shard it does not hold is new) or at generation 0
    (a never-started task there began from the configuration, as its shards do now). A chain that
    ends before either, at an incomplete generation, with shards still unfound is refused: those
    shards might have positions further back, and starting them from the configuration could skip
    changes.
    """
    out = GenerationOffsets({})
    generation_of: dict[str, int] = {}
    found: GenerationOffsets | None = None
    for gen, tasks in chain:
        found = read_generation(lookup, server, tasks, gen, require_all=False)
        assert found is not None  # chains hold generations >= 0
        for shard in shards - set(out.positions):
            if shard in found.positions:
                out.positions[shard] = found.positions[shard]
                out.values[shard] = found.values[shard]
                generation_of[shard] = gen
        if set(out.positions) >= shards or not found.missing or gen == 0:
            return out, generation_of
    assert found is not None  # the chain is never empty (it starts with the previous generation)
    oldest = chain[-1][0]
    names = ", ".join(str(p) for p in found.missing)
    unfound = java_sorted(shards - set(out.positions))
    raise MissingOffsetsError(
        f"No offset found for {names}, and shards {unfound} are in no generation of the recorded chain "
        f"({', '.join(f'{g}:{n}' for g, n in chain)}); generation {oldest}, the oldest recorded, is "
        "incomplete, so their positions may be older still. Write their offsets "
        "(shardcdc offsets alter) or reset the connector's offsets.",
        found.missing,
    )


def _same(a: Iterable[str] | None, b: Iterable[str] | None) -> bool:
    return a is not None and b is not None and set(a) == set(b)


@dataclass(frozen=True, slots=True)
class TaskAssignment:
    """One task of a generation: its key, shards (sorted) and starting VGTID."""

    task_id: int
    task_count: int
    gen: int
    shards: list[str]
    start: Vgtid
    sources: dict[str, str]  # shard -> "current-generation" | "previous-generation" | "config"

    @property
    def task_key(self) -> str:
        return task_key_name(self.task_id, self.task_count, self.gen)


def _start_for(
    shard: str,
    current: GenerationOffsets | None,
    previous: GenerationOffsets | None,
    config: Mapping[str, ShardGtid],
) -> tuple[ShardGtid, str]:
    if current is not None and shard in current.positions:
        return current.positions[shard], "current-generation"
    if previous is not None and shard in previous.positions:
        return previous.positions[shard], "previous-generation"
    return config[shard], "config"


def plan_tasks(
    lookup: OffsetLookup,
    *,
    server: str,
    keyspace: str,
    tasks_max: int,
    gen: int,
    prev_task_count: int,
    current_shards: Sequence[str],
    vgtid_setting: str = CURRENT_GTID,
) -> list[TaskAssignment]:
    """Debezium's ``taskConfigs`` for per-task mode: shard set, safety checks, assignment, starts.

    ``current_shards`` are the keyspace's shards now (``vitess.shard`` or ``SHOW VITESS_SHARDS``).
    Raises ``SameGenerationError`` for a new generation that changes nothing, ``ShardLossError``
    when the previous generation's shards strictly contain the current ones, and
    ``MissingOffsetsError`` when a needed generation is incomplete.
    """
    if gen < 0:
        raise MigrationError(f"vitess.offset.storage.task.key.gen must be >= 0 in per-task mode, got {gen}")
    if not current_shards:
        raise MigrationError(f"keyspace {keyspace!r} has no shards to stream")
    if gen > 0 and prev_task_count < 1:
        raise MigrationError(f"vitess.prev.num.tasks must be > 0 for generation {gen}, got {prev_task_count}")
    current_set = set(current_shards)
    tasks = min(tasks_max, len(current_set))
    current = read_generation(lookup, server, tasks, gen, require_all=False)
    assert current is not None  # gen >= 0
    previous: GenerationOffsets | None = None
    if gen > 0:
        # Needed (and then required whole) only while the current generation is incomplete.
        previous = read_generation(lookup, server, prev_task_count, gen - 1, require_all=bool(current.missing))
        if previous is not None and previous.missing:
            previous = None
    prev_shards = set(previous.positions) if previous is not None else None
    if gen > 0 and tasks == prev_task_count and _same(prev_shards, current_set):
        raise SameGenerationError(
            f"Previous num.tasks: {prev_task_count} and current num.tasks: {tasks} are the same, and previous "
            f"shards {java_sorted(prev_shards or ())} and current shards {java_sorted(current_set)} are the same. "
            "Choose a different tasks.max (or wait for the shard set to change) to change the task parallelism; "
            "otherwise reset vitess.offset.storage.task.key.gen to its previous value."
        )
    if prev_shards is not None and not _same(prev_shards, current_set) and prev_shards >= current_set:
        raise ShardLossError(
            f"Previous shards: {java_sorted(prev_shards)} are a superset of the current shards: "
            f"{java_sorted(current_set)}. The positions of {java_sorted(prev_shards - current_set)} would be "
            "lost if we continued."
        )
    if current.positions and not current_set >= set(current.positions):
        # Stored shards the keyspace no longer has (split while we were down): rely on the stored
        # shards, and then every key of this generation must be there.
        current = read_generation(lookup, server, tasks, gen, require_all=True)
        assert current is not None
    if not current.positions:
        # Nothing stored yet for this generation: the previous generation's shards if the keyspace
        # was resharded while nobody streamed (DBZ-6011), else the current shards.
        use_prev = bool(prev_shards) and not current_set >= (prev_shards or set())
        shards = list(prev_shards or ()) if use_prev else list(current_set)
    elif not current_set >= set(current.positions):
        shards = list(current.positions)
    else:
        shards = list(current_set)
    config = configured_start(keyspace, shards, vgtid_setting)
    plan: list[TaskAssignment] = []
    for tid, task_shards in enumerate(assign_shards(shards, tasks)):
        starts = [_start_for(s, current, previous, config) for s in task_shards]
        plan.append(
            TaskAssignment(
                task_id=tid,
                task_count=tasks,
                gen=gen,
                shards=task_shards,
                start=Vgtid(tuple(sg for sg, _ in starts)),
                sources={s: src for s, (_, src) in zip(task_shards, starts, strict=True)},
            )
        )
    return plan


@dataclass(frozen=True, slots=True)
class TaskStart:
    """Where one task resumes, and why."""

    vgtid: Vgtid
    sources: dict[str, str]  # shard -> "stored" | "current-generation" | "previous-generation" | "generation-<g>" | "config"
    stored: OffsetValue | None  # the task's own offset, when it had one
    # Without one: per shard, the offset value (of another task key) its position came from, so
    # per-shard state stored beside it (a backfill hold) moves with the shard to its new task.
    inherited: dict[str, OffsetValue] = field(default_factory=dict)


def resolve_task_start(
    lookup: OffsetLookup,
    *,
    server: str,
    keyspace: str,
    shards: Sequence[str],
    task_id: int | None = None,
    task_count: int = 1,
    gen: int = -1,
    prev_task_count: int = -1,
    vgtid_setting: str = CURRENT_GTID,
    chain: Sequence[tuple[int, int]] | None = None,
) -> TaskStart:
    """The VGTID a task starts from. ``task_id=None`` means per-task mode is off (plain server key).

    The task's own stored offset wins as a whole (its shards may differ from ``shards`` after a
    reshard it followed). Otherwise each assigned shard comes from the current generation, the
    previous generation (which must then be complete) or the configuration, and the VGTID is
    built in sorted shard order.

    ``chain`` is the operator's record of the generations before this one, newest first, as
    ``(generation, task count)`` starting with the previous one (``shardcdc.task.history``). With it
    a previous-generation key may be missing: that task never stored an offset, so it never moved
    its shards, and they resume from the newest generation of the chain that holds them (see
    ``_read_chain``). Without it, Debezium's rule: the previous generation must be complete.
    """
    own = (
        OffsetPartition(server)
        if task_id is None
        else OffsetPartition.for_task(server, task_id, task_count, gen)
    )
    stored = lookup(own)
    if stored is not None:
        vgtid = stored.vgtid
        return TaskStart(vgtid, {sg.shard: "stored" for sg in vgtid}, stored)
    ordered = java_sorted(shards)
    config = configured_start(keyspace, ordered, vgtid_setting)
    if task_id is None:
        return TaskStart(Vgtid(tuple(config[s] for s in ordered)), dict.fromkeys(ordered, "config"), None)
    current = read_generation(lookup, server, task_count, gen, require_all=False)
    assert current is not None  # per-task mode: gen >= 0
    previous: GenerationOffsets | None = None
    sources: dict[str, str] = {}
    uncovered = set(ordered) - set(current.positions)
    if uncovered and chain is None:
        previous = read_generation(lookup, server, prev_task_count, gen - 1, require_all=True)
    elif uncovered and chain is not None:
        previous, generation_of = _read_chain(lookup, server, chain, uncovered)
        sources = {s: "previous-generation" if g == gen - 1 else f"generation-{g}" for s, g in generation_of.items()}
    starts = [_start_for(s, current, previous, config) for s in ordered]
    inherited = {}
    for s, (_, src) in zip(ordered, starts, strict=True):
        held = current if src == "current-generation" else previous if src == "previous-generation" else None
        if held is not None and s in held.values:
            inherited[s] = held.values[s]
    return TaskStart(
        Vgtid(tuple(sg for sg, _ in starts)),
        {s: sources.get(s, src) for s, (_, src) in zip(ordered, starts, strict=True)},
        None,
        inherited,
    )
