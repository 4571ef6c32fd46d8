"""The operator's pure planner: from spec, serving shards, the generation record and task reports to a Plan.

No Kubernetes I/O happens here; the operator (and local mode) gather the inputs, call :func:`plan`,
apply the result and persist ``Plan.generation`` as ``status.assignment``. Planning is a function of
its inputs only, so planning twice on the same inputs gives the same plan, and the record persisted
in status is the planner's memory between reconciles (a drain's target survives the workers' exit).

Generations (what Debezium makes users do by hand with ``vitess.offset.storage.task.key.gen`` and
``vitess.prev.num.tasks``):

* the task count is ``min(spec.tasks, len(shards))``; shards are dealt round-robin in Java natural
  ``String`` order, exactly as ``VitessConnector.taskConfigs`` does (shared with the worker);
* any change of the actual task count or of the shard set needs a new generation. The old one is
  drained first: every worker is stopped and the plan waits until all have exited (their offsets
  are then durable); only then does generation ``gen+1`` start with ``previousTasks`` = the old
  actual count. Two generations never run at once.

Resharding is followed, never guessed:

* a worker that exited with "reassignment needed" reports the journal: the participant (source)
  shards it streamed and the target shards with their positions. The next generation streams
  ``(old - participants) | targets``. The worker commits the journal's target positions as its
  offset before exiting, so the new generation resumes them through the usual previous-generation
  lookup; the plan also carries them (``Generation.journal_positions``) for status and events.
* a serving shard set that lost shards whose key ranges are covered by new serving shards is a
  cut-over the workers have not reached yet: the plan keeps the generation running until the
  workers streaming the old shards report the journal (starting the new shards from anywhere
  else could skip the events between the worker's position and the cut-over).
* shards that disappear with nothing covering their key ranges are refused (Debezium's
  ``validateNoLostShardData``): the generation is kept and ``Degraded`` says which shards.
* newly served shards that do not replace anything (an explicit ``shards`` list grew) start a new
  generation at once; the new shards start as ``snapshot.mode`` says.

The first generation adopts offsets that exist already (``cdcoperator.adoption``: a Debezium
connector of the same name, or a re-created CdcConnector): it starts at the adopted generation + 1
with ``previousTasks`` = that generation's task count. If the adopted records name shards the
selection no longer has (resharded while nothing streamed), those shards are streamed first, as
Debezium does (DBZ-6011), and the reshard is then followed or refused as usual.

``spec.state``: ``paused`` and ``stopped`` stop every worker and keep the generation (and its
offsets); ``stopped`` additionally records, once every worker has exited, that the offsets are
final, so a restart needs no replay and offsets may be listed or reset. Changes made while not
running are recorded as pending and applied when the connector runs again.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cdcoperator import conditions as cond
from cdcoperator.adoption import Adoption, chain_from_status, chain_to_status
from cdcoperator.conditions import ConditionSpec
from cdcoperator.model import ConnectorSpec, State
from cdcworker.jsontypes import JsonMapping
from cdcworker.keyrange import parse_shard
from cdcworker.offsets.handback import ShardcdcGeneration
from cdcworker.offsets.migration import assign_shards, java_sorted

if TYPE_CHECKING:
    from cdcworker.offsets.handback import ShardcdcGeneration

__all__ = [
    "HISTORY_LIMIT",
    "Action",
    "Event",
    "GenPhase",
    "Generation",
    "Journal",
    "PendingChange",
    "Plan",
    "Refusal",
    "TaskPhase",
    "TaskPlan",
    "TaskRef",
    "TaskReport",
    "desired_shards",
    "generation_from_status",
    "generation_to_status",
    "plan",
    "recorded_generation",
]


class TaskPhase(enum.StrEnum):
    """What one task's worker is doing, as the operator observed it (pod + worker status document)."""

    PENDING = "Pending"  # object exists, no running pod yet
    STARTING = "Starting"  # pod running, worker not ready
    SNAPSHOTTING = "Snapshotting"  # VStream copy phase
    STREAMING = "Streaming"  # ready, streaming binlog events
    FAILED = "Failed"  # crash-looping or reporting an error
    COMPLETED = "Completed"  # snapshot.mode=initial_only: the snapshot is done; the worker idles until stopped
    EXITED = "Exited"  # stopped with its offsets committed
    REASSIGNMENT_NEEDED = "ReassignmentNeeded"  # stopped at a reshard journal


_GONE = frozenset({TaskPhase.EXITED, TaskPhase.REASSIGNMENT_NEEDED})


def _alive(reports: Iterable[TaskReport]) -> list[TaskReport]:
    """Tasks with a worker process that may still run: never two generations at once."""
    return [r for r in reports if r.phase not in _GONE or r.running]


class GenPhase(enum.StrEnum):
    """Lifecycle of the current generation (``status.assignment.phase``)."""

    RUNNING = "Running"
    DRAINING = "Draining"
    PAUSED = "Paused"
    STOPPED = "Stopped"


class Action(enum.StrEnum):
    """What the operator does with this plan."""

    START = "Start"  # create the generation's workers (a new generation)
    KEEP = "Keep"  # ensure the current generation's workers exist and run
    DRAIN = "Drain"  # stop every worker of the current generation, wait for them to exit
    STOP = "Stop"  # paused/stopped: no workers
    WAIT = "Wait"  # nothing can be started yet (source unreachable, no shards)


@dataclass(frozen=True, slots=True)
class Journal:
    """A reshard journal a worker stopped at: source shards it streamed, target shards and positions."""

    participants: tuple[str, ...]
    positions: tuple[tuple[str, str], ...]  # (target shard, gtid), sorted by shard

    @classmethod
    def of(cls, participants: Iterable[str], positions: Mapping[str, str]) -> Journal:
        return cls(tuple(java_sorted(set(participants))), tuple(sorted(positions.items())))

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(s for s, _ in self.positions)


@dataclass(frozen=True, slots=True)
class TaskReport:
    """What the operator observed for one task's worker (one entry per existing worker object)."""

    generation: int
    task_id: int
    phase: TaskPhase
    pod: str | None = None
    position: str | None = None
    lag_ms: int | None = None
    journal: Journal | None = None
    message: str = ""
    # A process of this task still runs although the phase says it stopped: Kubernetes restarts
    # a Deployment's container after the reshard exit. The task is not gone until it is stopped.
    running: bool = False


@dataclass(frozen=True, slots=True)
class PendingChange:
    """The next generation's layout, decided while the current one drains or is paused."""

    shards: tuple[str, ...]
    tasks: int
    reason: str  # Scale | Reshard | ShardsAdded
    journals: tuple[Journal, ...] = ()


@dataclass(frozen=True, slots=True)
class Generation:
    """The generation record persisted in ``status.assignment``."""

    generation: int
    task_count: int  # actual task count = min(spec.tasks, shards)
    prev_task_count: int  # -1 for generation 0
    assignment: tuple[tuple[str, ...], ...]  # task id -> shards (Java-sorted)
    phase: GenPhase = GenPhase.RUNNING
    pending: PendingChange | None = None
    stopped_cleanly: bool = False
    journal_positions: tuple[tuple[str, str], ...] = ()
    # The generations before this one, newest first from the previous: (generation, tasks). The
    # workers resume a shard whose previous-generation task never stored an offset (its pod was
    # never scheduled) from the newest of them that holds it (``shardcdc.task.history``).
    history: tuple[tuple[int, int], ...] = ()

    @property
    def shards(self) -> tuple[str, ...]:
        return tuple(java_sorted(s for task in self.assignment for s in task))


@dataclass(frozen=True, slots=True)
class TaskRef:
    generation: int
    task_id: int


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """One worker of the planned generation and whether it should run (replicas 1) or not (0)."""

    generation: int
    task_id: int
    task_count: int
    prev_task_count: int
    shards: tuple[str, ...]
    run: bool
    history: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    action: Action
    generation: Generation | None  # the record to persist (None: nothing started yet)
    workers: tuple[TaskPlan, ...] = ()
    stop: tuple[TaskRef, ...] = ()  # scale these workers to zero and wait for them to exit
    remove: tuple[TaskRef, ...] = ()  # delete these workers' objects (they have exited)
    conditions: tuple[ConditionSpec, ...] = ()
    refusals: tuple[Refusal, ...] = ()
    events: tuple[Event, ...] = field(default=())
    desired_shards: tuple[str, ...] | None = None
    # While a drain waits: the next generation's workers as the pending change would start them,
    # whose ConfigMap may be written ahead (nothing mounts it before their Deployments exist,
    # which only the start creates), so the start creates only the Deployments.
    prepare: tuple[TaskPlan, ...] = ()
    # A drain that stops every worker of this generation and follows no reshard journal: its
    # Deployments are deleted in one call (the pods go as a scale to zero would take them) instead
    # of one replica patch per task, on the path from kubectl scale to the next generation.
    drain_whole: int | None = None

    @property
    def ready(self) -> bool:
        return any(c.type == cond.READY and c.status for c in self.conditions)


# --- shard sets -------------------------------------------------------------------------------------


def desired_shards(spec: ConnectorSpec, serving: Iterable[str]) -> tuple[str, ...]:
    """Serving shards the connector should stream: all, or those overlapping ``spec...shards``' ranges.

    Matching by key range rather than by name follows reshards of an explicit list: a listed ``-80``
    split into ``-40`` and ``40-80`` selects both halves.
    """
    serving_set = set(serving)
    if spec.source.shards is None:
        return tuple(java_sorted(serving_set))
    wanted = [parse_shard(s) for s in spec.source.shards]
    return tuple(java_sorted(s for s in serving_set if any(parse_shard(s).overlaps(w) for w in wanted)))


def _covered(shard: str, by: Iterable[str]) -> bool:
    """True if the key range of ``shard`` is fully covered by the ranges of ``by`` (no gap)."""
    target = parse_shard(shard)
    ranges = sorted(
        (r for r in map(parse_shard, by) if r.overlaps(target)), key=lambda r: (r.start, not r.end, r.end)
    )
    pos = target.start  # b"" is MIN, which sorts below every other start
    for r in ranges:
        if r.start > pos:
            return False  # a gap before this range
        if not r.end:
            return True
        pos = max(pos, r.end)
        if target.end and pos >= target.end:
            return True
    return False


def _lost(removed: Iterable[str], serving: Sequence[str]) -> list[str]:
    return java_sorted(s for s in removed if not _covered(s, serving))


# --- the planner ------------------------------------------------------------------------------------


# Generations kept in ``status.assignment.history``. A chain this long of generations that each
# had a task never started is not expected; past it the workers need the oldest one whole again.
HISTORY_LIMIT = 16


def _new_generation(
    gen: int, shards: Sequence[str], tasks_max: int, previous: int, journal_positions: tuple[tuple[str, str], ...] = (),
    history: Sequence[tuple[int, int]] = (),
) -> Generation:
    """The record of generation ``gen``; ``history``: the generations before it, newest first."""
    assignment = tuple(tuple(t) for t in assign_shards(shards, tasks_max))
    return Generation(gen, len(assignment), previous, assignment, journal_positions=journal_positions,
                      history=tuple(history)[:HISTORY_LIMIT])


def _workers(g: Generation, run: bool) -> tuple[TaskPlan, ...]:
    return tuple(
        TaskPlan(g.generation, tid, g.task_count, g.prev_task_count, shards, run, g.history)
        for tid, shards in enumerate(g.assignment)
    )


def _behind_the_journal(current: Generation, alive: Sequence[TaskReport], journals: Sequence[Journal]) -> list[int]:
    """Streaming tasks holding a participant shard of a reported journal, which they have not
    reached yet. Only tasks seen streaming count: a stopped worker's terminating pod (no status
    document: Starting) must not be started again."""
    participants = {s for j in journals for s in j.participants}
    return sorted(r.task_id for r in alive if r.phase in (TaskPhase.STREAMING, TaskPhase.SNAPSHOTTING)
                  and r.task_id < len(current.assignment) and participants & set(current.assignment[r.task_id]))


def _merge_journals(old: Iterable[Journal], new: Iterable[Journal]) -> tuple[Journal, ...]:
    seen: dict[Journal, None] = dict.fromkeys(old)
    seen.update(dict.fromkeys(new))
    return tuple(sorted(seen, key=lambda j: (j.participants, j.positions)))


def _apply_journals(shards: Iterable[str], journals: Sequence[Journal]) -> tuple[str, ...]:
    out = set(shards)
    for j in journals:
        out.difference_update(j.participants)
    for j in journals:
        out.update(j.targets)
    return tuple(java_sorted(out))


def plan(
    spec: ConnectorSpec,
    serving: Sequence[str] | None,
    current: Generation | None,
    reports: Sequence[TaskReport] = (),
    *,
    source_error: str = "",
    adopted: Adoption | None = None,
    offsets_error: str = "",
) -> Plan:
    """Plan one reconcile. ``serving`` is None when the source could not be asked (``source_error`` says why).

    Before the first generation, ``adopted`` is what the offsets topic held (None: not scanned,
    start from scratch) and ``offsets_error`` why it could not be read (then nothing starts).
    """
    p = _plan(spec, serving, current, reports, source_error=source_error, adopted=adopted,
              offsets_error=offsets_error)
    return _without_strangers(p, current, reports)


def _without_strangers(p: Plan, current: Generation | None, reports: Sequence[TaskReport]) -> Plan:
    """Workers of a generation newer than the recorded one (a reconcile created them and its status
    write was lost, or an offsets reset cleared the record): never two generations at once. They
    are stopped, nothing new starts until they have exited, and then their objects are removed."""
    cur_gen = current.generation if current is not None else -1
    strangers = [r for r in reports if r.generation > cur_gen]
    if not strangers:
        return p
    alive = {TaskRef(r.generation, r.task_id) for r in _alive(strangers)}
    gone = {TaskRef(r.generation, r.task_id) for r in strangers} - alive
    order = sorted(alive | gone, key=lambda t: (t.generation, t.task_id))
    stop = tuple(dict.fromkeys((*p.stop, *(t for t in order if t in alive))))
    remove = tuple(dict.fromkeys((*p.remove, *(t for t in order if t in gone))))
    planned = {TaskRef(w.generation, w.task_id) for w in p.workers}  # a new START may reuse their names
    remove = tuple(t for t in remove if t not in planned)
    if not alive or p.action is not Action.START:
        return replace(p, stop=stop, remove=remove)
    names = ", ".join(f"g{t.generation}-t{t.task_id}" for t in order if t in alive)
    message = (f"workers {names} of an unrecorded generation are still running; they are being stopped, "
               f"and generation {p.generation.generation if p.generation else 0} starts once they have exited")
    waiting = ConditionSpec(cond.PROGRESSING, True, "StoppingUnrecordedWorkers", message)
    kept = tuple(c for c in p.conditions if c.type != cond.PROGRESSING)
    ready = tuple(ConditionSpec(cond.READY, False, "StoppingUnrecordedWorkers", message) if c.type == cond.READY else c
                  for c in kept)
    return Plan(Action.WAIT, current, _workers(current, run=False) if current is not None else (), stop=stop,
                remove=tuple(t for t in remove if current is None or t.generation != current.generation),
                conditions=(*ready, waiting), desired_shards=p.desired_shards,
                events=(Event("Warning", "StoppingUnrecordedWorkers", message),))


def _next_change(spec: ConnectorSpec, wanted: Sequence[str] | None, current: Generation,
                 journals: tuple[Journal, ...]) -> tuple[PendingChange | None, list[Refusal], list[str], str]:
    """The shard set and task count the next generation should have, if they change: (the change,
    refusals, shards awaiting their journal, the Resharding reason)."""
    refusals: list[Refusal] = []
    awaiting_journal: list[str] = []
    reshard_reason = ""
    old_shards = current.shards
    next_shards = old_shards
    reason = ""
    if journals:
        next_shards = _apply_journals(old_shards, journals)
        reason, reshard_reason = "Reshard", "FollowingJournal"
    elif wanted is not None and set(wanted) != set(old_shards):
        removed = [s for s in old_shards if s not in wanted]
        lost = _lost(removed, wanted)
        if lost:
            refusals.append(
                Refusal(
                    "ShardsLost",
                    f"shards {', '.join(lost)} of generation {current.generation} are no longer selected and "
                    f"no selected serving shard covers their key ranges (selected: {', '.join(wanted) or 'none'}); "
                    "starting a new generation would lose their positions, so the current generation is kept",
                )
            )
        elif removed:
            awaiting_journal = removed
            reshard_reason = "AwaitingJournal"
        else:
            next_shards, reason = tuple(wanted), "ShardsAdded"
    elif current.pending is not None and not journals:
        next_shards = current.pending.shards
        reason = current.pending.reason
    next_tasks = min(spec.tasks, len(next_shards))
    if not reason and next_tasks != current.task_count and not awaiting_journal and not refusals:
        reason = "Scale"
    change = (
        PendingChange(next_shards, next_tasks, reason, journals)
        if reason and (set(next_shards) != set(old_shards) or next_tasks != current.task_count)
        else None
    )
    return change, refusals, awaiting_journal, reshard_reason


@dataclass(frozen=True, slots=True)
class _Step:
    """What one branch of ``_plan`` decided for the workers of the recorded generation.

    A named value (rather than six loose locals assigned in every branch) lets each branch be its
    own short function, and makes it visible that every branch decides all of them."""

    action: Action
    record: Generation
    workers: tuple[TaskPlan, ...]
    stop: tuple[TaskRef, ...]
    remove: tuple[TaskRef, ...]
    events: tuple[Event, ...] = ()
    prepare: tuple[TaskPlan, ...] = ()
    drain_whole: int | None = None


def _plan(
    spec: ConnectorSpec,
    serving: Sequence[str] | None,
    current: Generation | None,
    reports: Sequence[TaskReport] = (),
    *,
    source_error: str = "",
    adopted: Adoption | None = None,
    offsets_error: str = "",
) -> Plan:
    """``plan`` for the recorded generation and older ones (newer workers: ``_without_strangers``)."""
    wanted = None if serving is None else desired_shards(spec, serving)
    running = spec.state is State.RUNNING
    # Reports of generations older than the current one: leftovers of a finished drain.
    cur_gen = current.generation if current is not None else -1
    leftovers = tuple(
        sorted({TaskRef(r.generation, r.task_id) for r in reports if r.generation < cur_gen},
               key=lambda t: (t.generation, t.task_id))
    )
    mine = sorted((r for r in reports if r.generation == cur_gen), key=lambda r: r.task_id)

    if current is None:
        return _plan_first(spec, wanted, running, leftovers, source_error, adopted, offsets_error)

    alive = _alive(mine)
    journals = _merge_journals(
        current.pending.journals if current.pending else (),
        (r.journal for r in mine if r.phase is TaskPhase.REASSIGNMENT_NEEDED and r.journal is not None),
    )
    # 1. The shard set the next generation should stream.
    change, refusals, awaiting_journal, reshard_reason = _next_change(spec, wanted, current, journals)

    # 2. What happens to the workers.
    if not running:
        step = _stopping(spec, current, change, alive, leftovers)
    elif change is not None and alive:
        step = _draining(spec, current, change, alive, journals, leftovers)
    elif change is not None:
        step = _starting(spec, current, change, mine, leftovers)
        mine = []  # the new generation has no reports yet; the old one's are being removed
    else:
        step = _keeping(current, leftovers)

    events = [*step.events, *(Event("Warning", r.reason, r.message) for r in refusals)]
    conditions = _conditions(
        spec,
        action=step.action,
        record=step.record,
        reports=mine,
        refusals=refusals,
        source_error=source_error if serving is None else "",
        reshard_reason=reshard_reason,
        awaiting_journal=awaiting_journal,
        change=change,
    )
    return Plan(
        action=step.action,
        generation=step.record,
        workers=step.workers,
        stop=step.stop,
        remove=step.remove,
        conditions=conditions,
        refusals=tuple(refusals),
        events=tuple(events),
        desired_shards=wanted,
        prepare=step.prepare,
        drain_whole=step.drain_whole,
    )


def _stopping(spec: ConnectorSpec, current: Generation, change: PendingChange | None,
              alive: Sequence[TaskReport], leftovers: tuple[TaskRef, ...]) -> _Step:
    """Paused or stopped: stop every worker but keep the generation, recording any change as pending
    so it is applied when the connector runs again (and, once all have exited, that offsets are final)."""
    phase = GenPhase.PAUSED if spec.state is State.PAUSED else GenPhase.STOPPED
    record = replace(
        current,
        phase=phase,
        pending=change,
        stopped_cleanly=spec.state is State.STOPPED and not alive,
    )
    events: list[Event] = []
    if current.phase is not phase:
        events.append(Event("Normal", phase.value, f"{spec.state.value}: stopping every worker of "
                            f"generation {current.generation}; offsets are kept"))
    if record.stopped_cleanly and not current.stopped_cleanly:
        events.append(Event("Normal", "StoppedCleanly", f"every worker of generation {current.generation} "
                            "has exited; offsets are final"))
    return _Step(Action.STOP, record, _workers(record, run=False),
                 stop=tuple(TaskRef(r.generation, r.task_id) for r in alive), remove=leftovers,
                 events=tuple(events))


def _draining(spec: ConnectorSpec, current: Generation, change: PendingChange, alive: Sequence[TaskReport],
              journals: Sequence[Journal], leftovers: tuple[TaskRef, ...]) -> _Step:
    """A change is due but workers of the current generation still run: drain them first, so two
    generations never run at once and the old one's offsets are durable before the next starts."""
    cur_gen = current.generation
    # A merge's participants can be spread over tasks: one reached the journal, the others
    # must stream their shards up to it too, or their changes before the cut-over are lost.
    # Those keep running; the others are stopped (one that reported the journal, restarted,
    # would stream the target shards from its offset, beside the next generation's workers).
    behind = _behind_the_journal(current, alive, journals)
    record = replace(current, phase=GenPhase.DRAINING, pending=change, stopped_cleanly=False)
    events: tuple[Event, ...] = ()
    if behind and current.pending != change:
        events = (Event("Normal", "AwaitingJournal", f"tasks {', '.join(map(str, behind))} of generation "
                        f"{cur_gen} stream shards of the reshard and have not reached its journal yet; "
                        "they keep streaming until they do"),)
    elif not behind and (current.phase is not GenPhase.DRAINING or current.pending != change):
        events = (Event("Normal", "Draining", _describe_change(current, change)),)
    workers = tuple(replace(w, run=w.task_id in behind) for w in _workers(record, run=True))
    stop = tuple(TaskRef(cur_gen, r.task_id) for r in alive if r.task_id not in behind)
    # Awaiting a journal, the pending change still moves (the journals it follows); otherwise it
    # is what the start will use, and the next generation's configuration can be written now.
    prepare = () if behind else _workers(_next_record(spec, current, change), run=True)
    # A reshard's workers report their journals from their pods: those are stopped one by one.
    whole = None if behind or journals else cur_gen
    return _Step(Action.DRAIN, record, workers, stop=stop, remove=leftovers, events=events, prepare=prepare,
                 drain_whole=whole)


def _starting(spec: ConnectorSpec, current: Generation, change: PendingChange,
              mine: Sequence[TaskReport], leftovers: tuple[TaskRef, ...]) -> _Step:
    """A change is due and every worker of the current generation has exited: start generation
    ``gen+1`` (previous task count = the old one's) and remove the old generation's objects."""
    cur_gen = current.generation
    record = _next_record(spec, current, change)
    event = Event("Normal", "GenerationStarted",
                  f"generation {record.generation} started: {record.task_count} tasks over "
                  f"{len(record.shards)} shards (previous tasks {record.prev_task_count}; {change.reason})")
    remove = tuple(sorted(set(leftovers) | {TaskRef(cur_gen, r.task_id) for r in mine},
                          key=lambda t: (t.generation, t.task_id)))
    return _Step(Action.START, record, _workers(record, run=True), stop=(), remove=remove, events=(event,))


def _next_record(spec: ConnectorSpec, current: Generation, change: PendingChange) -> Generation:
    """The record of the generation ``change`` starts after ``current`` (previous task count = its)."""
    return _new_generation(
        current.generation + 1,
        change.shards,
        spec.tasks,
        current.task_count,
        journal_positions=tuple(sorted(p for j in change.journals for p in j.positions)),
        history=((current.generation, current.task_count), *current.history),
    )


def _keeping(current: Generation, leftovers: tuple[TaskRef, ...]) -> _Step:
    """Nothing to change: run the current generation (resuming it if it was paused or stopped)."""
    record = replace(current, phase=GenPhase.RUNNING, pending=None, stopped_cleanly=False)
    events: tuple[Event, ...] = ()
    if current.phase in (GenPhase.PAUSED, GenPhase.STOPPED):
        events = (Event("Normal", "Resumed", f"generation {current.generation} resumed"),)
    return _Step(Action.KEEP, record, _workers(record, run=True), stop=(), remove=leftovers, events=events)


def _describe_change(current: Generation, change: PendingChange) -> str:
    parts = [f"stopping the {current.task_count} workers of generation {current.generation} to start generation "
             f"{current.generation + 1}"]
    if change.tasks != current.task_count:
        parts.append(f"tasks {current.task_count} -> {change.tasks}")
    old, new = set(current.shards), set(change.shards)
    if old != new:
        gone, added = java_sorted(old - new), java_sorted(new - old)
        parts.append(f"shards -[{', '.join(gone)}] +[{', '.join(added)}]")
    return "; ".join(parts) + f" ({change.reason})"


def _plan_first(
    spec: ConnectorSpec,
    wanted: tuple[str, ...] | None,
    running: bool,
    leftovers: tuple[TaskRef, ...],
    source_error: str,
    adopted: Adoption | None,
    offsets_error: str,
) -> Plan:
    """No generation yet: start the first generation (0, or after adopted offsets), or explain why not."""
    paused = cond.ConditionSpec(cond.PAUSED, not running, spec.state.value.capitalize() if not running else "Running")
    reshard = ConditionSpec(cond.RESHARDING, False, "NoReshard")
    if wanted is None or not wanted:
        reason = "SourceUnreachable" if wanted is None else "NoShards"
        message = (
            f"cannot list the shards of keyspace {spec.source.keyspace}: {source_error or 'unknown error'}"
            if wanted is None
            else f"keyspace {spec.source.keyspace} has no serving shards to stream"
            + (f" among {', '.join(spec.source.shards)}" if spec.source.shards else "")
        )
        conditions: tuple[ConditionSpec, ...] = (
            ConditionSpec(cond.READY, False, reason, message),
            ConditionSpec(cond.PROGRESSING, True, reason, message),
            ConditionSpec(cond.DEGRADED, True, reason, message),
            reshard,
            paused,
        )
        return Plan(Action.WAIT, None, remove=leftovers, conditions=conditions, desired_shards=wanted,
                    events=(Event("Warning", reason, message),))
    if not running:
        message = f"connector is {spec.state.value}; no generation has been started yet"
        conditions = (
            ConditionSpec(cond.READY, False, spec.state.value.capitalize(), message),
            ConditionSpec(cond.PROGRESSING, False, spec.state.value.capitalize(), message),
            ConditionSpec(cond.DEGRADED, False, "AsExpected", ""),
            reshard,
            paused,
        )
        return Plan(Action.STOP, None, remove=leftovers, conditions=conditions, desired_shards=wanted)
    if offsets_error:
        message = (f"cannot read offsets topic {spec.kafka.offsets_topic} to adopt existing offsets before the "
                   f"first generation: {offsets_error}")
        conditions = (
            ConditionSpec(cond.READY, False, "OffsetsUnreadable", message),
            ConditionSpec(cond.PROGRESSING, True, "OffsetsUnreadable", message),
            ConditionSpec(cond.DEGRADED, True, "OffsetsUnreadable", message),
            reshard,
            paused,
        )
        return Plan(Action.WAIT, None, remove=leftovers, conditions=conditions, desired_shards=wanted,
                    events=(Event("Warning", "OffsetsUnreadable", message),))
    adoption = adopted or Adoption()
    shards = wanted
    kept = desired_shards(spec, adoption.shards) if adoption.shards else ()
    if kept and not set(wanted) >= set(kept):
        shards = kept  # resharded while nothing streamed: resume the stored shards, then follow the journal
    record = _new_generation(adoption.first_generation, shards, spec.tasks, adoption.previous_tasks,
                             history=adoption.chain)
    events: list[Event] = []
    if adopted is not None and (adopted.found or adopted.skipped):
        events.append(Event("Warning" if adopted.skipped or not adopted.complete else "Normal", "AdoptedOffsets",
                            adopted.describe(spec.kafka.topic_prefix)))
    started = f"generation {record.generation} started: {record.task_count} tasks over {len(record.shards)} shards"
    if adoption.per_task:
        started += f" (previous tasks {record.prev_task_count}; AdoptedOffsets)"
    events.append(Event("Normal", "GenerationStarted", started))
    conditions = _conditions(spec, action=Action.START, record=record, reports=[], refusals=[], source_error="",
                             reshard_reason="", awaiting_journal=[], change=None)
    return Plan(Action.START, record, _workers(record, run=True), remove=leftovers, conditions=conditions,
                events=tuple(events), desired_shards=wanted)


def _conditions(
    spec: ConnectorSpec,
    *,
    action: Action,
    record: Generation,
    reports: Sequence[TaskReport],
    refusals: Sequence[Refusal],
    source_error: str,
    reshard_reason: str,
    awaiting_journal: Sequence[str],
    change: PendingChange | None,
) -> tuple[ConditionSpec, ...]:
    by_id = {r.task_id: r for r in reports} if action is not Action.START else {}
    phases = [by_id[t].phase if t in by_id else TaskPhase.PENDING for t in range(record.task_count)]
    not_streaming = [(t, p) for t, p in enumerate(phases) if p not in (TaskPhase.STREAMING, TaskPhase.COMPLETED)]
    completed = phases.count(TaskPhase.COMPLETED)
    failed = [t for t, p in enumerate(phases) if p is TaskPhase.FAILED]
    state_word = spec.state.value.capitalize()

    # Ready: every task of the generation streams; anything else is not ready (Strimzi #6624).
    if action is Action.STOP:
        ready = ConditionSpec(cond.READY, False, state_word, f"connector is {spec.state.value}")
    elif action in (Action.DRAIN, Action.START):
        ready = ConditionSpec(cond.READY, False, "GenerationChange",
                              f"moving to generation {record.generation + (1 if action is Action.DRAIN else 0)}")
    elif not_streaming:
        ready = ConditionSpec(cond.READY, False, "TasksNotStreaming",
                              "; ".join(f"task {t}: {p.value}" for t, p in not_streaming))
    elif completed == len(phases):
        ready = ConditionSpec(cond.READY, True, "SnapshotCompleted",
                              f"snapshot.mode initial_only: {record.task_count} tasks copied {len(record.shards)} shards "
                              f"in generation {record.generation}; nothing streams")
    else:
        ready = ConditionSpec(cond.READY, True, "AllTasksStreaming",
                              f"{record.task_count} tasks streaming {len(record.shards)} shards in generation "
                              f"{record.generation}")

    # Progressing: the operator or the workers are moving toward the desired state.
    if action is Action.DRAIN:
        progressing = ConditionSpec(cond.PROGRESSING, True, "Draining", _describe_change(record, change)
                                    if change else "draining")
    elif action is Action.START:
        progressing = ConditionSpec(cond.PROGRESSING, True, "GenerationStarted",
                                    f"starting {record.task_count} workers of generation {record.generation}")
    elif action is Action.STOP:
        alive = _alive(reports)
        progressing = (
            ConditionSpec(cond.PROGRESSING, True, "Stopping", f"waiting for {len(alive)} workers to exit")
            if alive
            else ConditionSpec(cond.PROGRESSING, False, state_word, f"no workers run while {spec.state.value}")
        )
    elif any(p in (TaskPhase.PENDING, TaskPhase.STARTING, TaskPhase.SNAPSHOTTING) for _, p in not_streaming):
        progressing = ConditionSpec(cond.PROGRESSING, True, "TasksStarting",
                                    "; ".join(f"task {t}: {p.value}" for t, p in not_streaming
                                              if p is not TaskPhase.FAILED))
    else:
        progressing = ConditionSpec(cond.PROGRESSING, False, "Stable",
                                    f"generation {record.generation} is running as planned")

    degraded = _degraded(refusals, source_error, failed if action is Action.KEEP else [], by_id)
    resharding = _resharding(action, record, reshard_reason, awaiting_journal, change)
    paused = (
        ConditionSpec(cond.PAUSED, True, state_word, f"spec.state is {spec.state.value}")
        if spec.state is not State.RUNNING
        else ConditionSpec(cond.PAUSED, False, "Running", "")
    )
    return (ready, progressing, degraded, resharding, paused)


def _degraded(refusals: Sequence[Refusal], source_error: str, failed: Sequence[int],
              by_id: Mapping[int, TaskReport]) -> ConditionSpec:
    """Degraded: something needs a human (or will not fix itself soon)."""
    problems: list[tuple[str, str]] = [(r.reason, r.message) for r in refusals]
    if source_error:
        problems.append(("SourceUnreachable", f"cannot list shards: {source_error}"))
    if failed:
        details = "; ".join(
            f"task {t}: {by_id[t].message}" if t in by_id and by_id[t].message else f"task {t} failed" for t in failed
        )
        problems.append(("TasksFailed", details))
    return (
        ConditionSpec(cond.DEGRADED, True, problems[0][0], "; ".join(m for _, m in problems))
        if problems
        else ConditionSpec(cond.DEGRADED, False, "AsExpected", "")
    )


def _resharding(action: Action, record: Generation, reshard_reason: str, awaiting_journal: Sequence[str],
                change: PendingChange | None) -> ConditionSpec:
    """Resharding: following (or waiting for) a reshard of the source keyspace."""
    if reshard_reason == "FollowingJournal":
        targets = java_sorted({s for j in (change.journals if change else ()) for s in j.targets})
        resharding = ConditionSpec(cond.RESHARDING, True, "FollowingJournal",
                                   f"workers reached a reshard journal; the next generation streams "
                                   f"{', '.join(targets)}")
    elif reshard_reason == "AwaitingJournal":
        resharding = ConditionSpec(cond.RESHARDING, True, "AwaitingJournal",
                                   f"shards {', '.join(awaiting_journal)} are no longer serving; waiting for "
                                   "their workers to reach the reshard journal")
    elif action is Action.START and record.journal_positions:
        resharding = ConditionSpec(cond.RESHARDING, True, "GenerationStarted",
                                   f"generation {record.generation} streams the reshard's target shards")
    elif change is not None and change.reason == "Reshard":
        resharding = ConditionSpec(cond.RESHARDING, True, "Pending", "a reshard is pending until the connector runs")
    else:
        resharding = ConditionSpec(cond.RESHARDING, False, "NoReshard", "")
    return resharding


# --- status.assignment (de)serialization ---------------------------------------------------------------


def _positions_to_status(positions: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"shard": s, "gtid": g} for s, g in positions]


def _positions_from_status(items: Iterable[Mapping[str, object]] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(i.get("shard")), str(i.get("gtid", ""))) for i in items or ()))


def generation_to_status(g: Generation) -> dict[str, object]:
    """``status.assignment`` without the per-task runtime fields (the operator adds ``taskStates``)."""
    out: dict[str, object] = {
        "generation": g.generation,
        "tasks": g.task_count,
        "previousTasks": g.prev_task_count,
        "phase": g.phase.value,
        "shards": list(g.shards),
        "stoppedCleanly": g.stopped_cleanly,
        "taskStates": [{"id": tid, "shards": list(shards)} for tid, shards in enumerate(g.assignment)],
    }
    if g.journal_positions:
        out["journalPositions"] = _positions_to_status(g.journal_positions)
    if g.history:
        out["history"] = chain_to_status(g.history)
    if g.pending is not None:
        out["pending"] = {
            "shards": list(g.pending.shards),
            "tasks": g.pending.tasks,
            "reason": g.pending.reason,
            "journals": [
                {"participants": list(j.participants), "positions": _positions_to_status(j.positions)}
                for j in g.pending.journals
            ],
        }
    return out


def generation_from_status(assignment: Mapping[str, object] | None) -> Generation | None:
    """The generation record from ``status.assignment`` (None when no generation has started)."""
    if not assignment or "generation" not in assignment:
        return None
    raw_tasks = assignment.get("taskStates") or []
    assert isinstance(raw_tasks, list)
    by_id = {int(t["id"]): tuple(java_sorted(t.get("shards") or ())) for t in raw_tasks}
    pending_raw = assignment.get("pending")
    pending = None
    if isinstance(pending_raw, Mapping):
        pending = PendingChange(
            shards=tuple(java_sorted(pending_raw.get("shards") or ())),
            tasks=int(pending_raw.get("tasks") or 0),
            reason=str(pending_raw.get("reason") or ""),
            journals=tuple(
                Journal(tuple(java_sorted(j.get("participants") or ())), _positions_from_status(j.get("positions")))
                for j in pending_raw.get("journals") or ()
            ),
        )
    return Generation(
        generation=int(str(assignment["generation"])),
        task_count=int(str(assignment.get("tasks", len(by_id)))),
        prev_task_count=int(str(assignment.get("previousTasks", -1))),
        assignment=tuple(by_id[t] for t in sorted(by_id)),
        phase=GenPhase(str(assignment.get("phase") or GenPhase.RUNNING.value)),
        pending=pending,
        stopped_cleanly=bool(assignment.get("stoppedCleanly", False)),
        journal_positions=_positions_from_status(assignment.get("journalPositions")),  # type: ignore[arg-type]
        history=chain_from_status(assignment.get("history")),
    )


def recorded_generation(body: JsonMapping | None) -> ShardcdcGeneration | None:
    """shardcdc's last generation as the hand-back to Debezium reads it (``status.assignment``)."""

    g = generation_from_status(((body or {}).get("status") or {}).get("assignment"))
    return None if g is None else ShardcdcGeneration(g.generation, g.task_count, g.prev_task_count, g.assignment, g.history)
