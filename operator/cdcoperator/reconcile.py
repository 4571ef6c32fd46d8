"""One level-based, idempotent reconcile of a CdcConnector: observe, plan, apply, record.

1. read the connector fresh from the API (handlers and the timer may hold stale bodies);
2. discover the serving shards; list the connector's Deployments; build one TaskReport per task
   from the pod index and the workers' status documents; before the first generation, scan the
   offsets topic once for offsets to adopt (``cdcoperator.adoption``);
3. ``planner.plan`` decides; this module only carries the plan out: create/patch the planned
   workers' ConfigMaps and Deployments (replicas 0 for workers that must stop; a generation
   drained whole loses its Deployments in one call, ``Plan.drain_whole``), delete the objects of
   exited generations, honour the one-shot ``shardcdc.io/restart`` annotation;
4. write ``status`` only when it differs, and emit an event for each step.

Calling it again with nothing changed sends no writes: children carry a hash of what we applied,
and the status comparison is exact. The caller serialises calls per connector (a lock in the
per-object memo), so the create/update handlers and the timer never interleave.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp

from cdcoperator import backfill, naming
from cdcoperator import conditions as cond
from cdcoperator.adoption import (
    SCAN_TIMEOUT,
    Adoption,
    OffsetScanError,
    adoption_from_status,
    adoption_to_status,
    scan_offsets,
)
from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS, ClusterApi
from cdcoperator.discovery import DEFAULT_TIMEOUT, Discovery, DiscoveryError, discover, source_access
from cdcoperator.kafkaaccess import KafkaAccess, kafka_access
from cdcoperator.model import ConnectorResource, SpecError, State
from cdcoperator.networkpolicy import NetworkPolicySettings, ensure_network_policy, network_policy_name
from cdcoperator.objects import build_config_map, build_deployment
from cdcoperator.offsetslost import LostTasks, kept_positions, settle_offsets_lost
from cdcoperator.planner import (
    Action,
    Event,
    Generation,
    GenPhase,
    Plan,
    TaskPhase,
    TaskPlan,
    TaskRef,
    TaskReport,
    generation_from_status,
    generation_to_status,
    plan,
)
from cdcoperator.policy import Policy
from cdcoperator.taskstatus import PodSummary, fetch_status, stray_pods, task_report
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = [
    "RESTARTED_AT_ANNOTATION",
    "Discoverer",
    "Emit",
    "ReconcileContext",
    "build_status",
    "discover_source",
    "merge_patch",
    "parse_restart",
    "reconcile",
    "reshard_events",
    "restart_stamp",
]

log = logging.getLogger("cdcoperator.reconcile")

RESTARTED_AT_ANNOTATION = f"{naming.PREFIX}/restartedAt"
Emit = Callable[[JsonMapping, str, str, str], None]  # (body, type, reason, message)
Discoverer = Callable[[ConnectorResource], Awaitable[Discovery]]
OffsetScanner = Callable[[ConnectorResource, KafkaAccess], Awaitable[Adoption]]  # raises OffsetScanError


async def discover_source(kube: ClusterApi, cr: ConnectorResource, timeout: float = DEFAULT_TIMEOUT) -> Discovery:
    """The source's shards, reached with the TLS material and credentials of the connector's Secrets."""
    access = await source_access(cr, kube.read_secret)
    return await asyncio.to_thread(discover, cr.spec.source, access=access, timeout=timeout)


async def _default_scan_offsets(cr: ConnectorResource, access: KafkaAccess) -> Adoption:
    return await asyncio.to_thread(scan_offsets, cr, SCAN_TIMEOUT, access)


@dataclass
class ReconcileContext:
    """What one reconcile needs besides the connector's name (shared across calls)."""

    kube: ClusterApi  # KubeApi, or LocalCluster in local mode
    http: aiohttp.ClientSession
    emit: Emit
    pods: Callable[[str, str], Iterable[PodSummary]]  # (namespace, connector) -> indexed pods
    discover: Discoverer | None = None  # None: discover_source with the Secrets read through ``kube``
    discovery_timeout: float = DEFAULT_TIMEOUT
    scan_offsets: OffsetScanner = field(default=_default_scan_offsets)
    clock: Callable[[], _dt.datetime] = field(default=lambda: _dt.datetime.now(_dt.UTC))
    # Reasons of warnings already emitted and still standing (kept by the caller across reconciles):
    # a refusal or an unreachable source is planned again on every resync but reported once, not
    # every 10 s; the condition's message carries the current details.
    warned: set[str] = field(default_factory=set)
    # The installer's limits on images and service accounts (cdcoperator.policy); None: unrestricted.
    policy: Policy | None = None
    # The workers' NetworkPolicy (the chart's networkPolicy values; cdcoperator.networkpolicy); None: none.
    network_policy: NetworkPolicySettings | None = None
    # Told what each plan runs: (namespace, connector, generation, workers running); the pod index
    # needs the count to tell the new generation's last pod up from the first (completes_transition).
    expect: Callable[[str, str, int, int], None] | None = None


# --- pure helpers -----------------------------------------------------------------------------------


def restart_stamp(now: _dt.datetime) -> str:
    """The ``restartedAt`` template annotation: UTC with microseconds, not metav1.Time's seconds,
    so two restarts within one second (``task=1``, then ``all``) each change the template; with the
    same value the second would recreate no pod."""
    return now.astimezone(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_restart(value: str, tasks: int) -> tuple[int, ...] | None:
    """Task ids a ``shardcdc.io/restart`` value names: "", "true", "all" -> every task; "task=<i>" -> one.

    None when the value is not understood or names a task that does not exist.
    """
    v = value.strip().lower()
    if v in ("", "true", "all", "yes"):
        return tuple(range(tasks))
    if v.startswith("task="):
        try:
            tid = int(v[5:])
        except ValueError:
            return None
        return (tid,) if 0 <= tid < tasks else None
    return None


def merge_patch(old: JsonMapping, new: JsonMapping) -> JsonObject:
    """A JSON merge patch (RFC 7386) turning ``old`` into ``new`` (keys of ``old`` absent in ``new`` -> null)."""
    out: JsonObject = {}
    for k in old:
        if k not in new:
            out[k] = None
    for k, v in new.items():
        o = old.get(k)
        if isinstance(v, Mapping) and isinstance(o, Mapping):
            sub = merge_patch(o, v)
            if sub:
                out[k] = sub
        elif k not in old or o != v:
            out[k] = v
    return out


def _lag_text(ms: int | None) -> str | None:
    if ms is None:
        return None
    # Whole seconds: finer steps would rewrite status on every resync for no reader's benefit.
    return f"{ms // 1000}s"


def build_status(
    cr: ConnectorResource,
    existing: JsonMapping,
    p: Plan,
    discovery: Discovery | None,
    reports: Sequence[TaskReport],
    now: _dt.datetime,
    adopted: Adoption | None = None,
) -> JsonObject:
    """The full ``status`` we want (keys we own only; unknown keys of ``existing`` are left alone).

    ``adopted`` is recorded with the first generation (``adoptedOffsets``), so the scan happens once.
    """
    status: JsonObject = {
        "observedGeneration": cr.generation,
        "conditions": cond.merge_conditions(existing.get("conditions"), p.conditions,
                                            observed_generation=cr.generation, now=now),
        "selector": naming.selector(cr.name),
    }
    old_shards = existing.get("shards") or {}
    if discovery is not None:
        shards: JsonObject = {
            "discovered": list(discovery.discovered),
            "serving": list(discovery.serving),
            "servingCount": len(discovery.serving),
        }
        unchanged = old_shards.get("serving") == shards["serving"] and old_shards.get("discovered") == shards[
            "discovered"]
        shards["lastDiscoveryTime"] = (old_shards.get("lastDiscoveryTime") if unchanged else None) or cond.format_time(
            now)
        status["shards"] = shards
    elif old_shards:
        status["shards"] = dict(old_shards)  # keep the last known list while the source is unreachable
    if p.generation is not None:
        assignment = generation_to_status(p.generation)
        by_task = {r.task_id: r for r in reports if r.generation == p.generation.generation}
        kept = kept_positions(existing, p.generation.generation)
        lags: list[int] = []
        task_states: list[JsonObject] = assignment["taskStates"]  # type: ignore[assignment]
        for ts in task_states:
            r = by_task.get(ts["id"])
            if r is None:
                ts["phase"] = "Pending" if p.action in (Action.START, Action.KEEP) else "Stopped"
                continue
            ts["phase"] = r.phase.value
            if r.pod:
                ts["pod"] = r.pod
            if r.position or ts["id"] in kept:
                ts["position"] = r.position or kept[ts["id"]]  # the last known one while it reports none
            if r.lag_ms is not None:
                ts["lag"] = _lag_text(r.lag_ms)
                lags.append(r.lag_ms)
            if r.message:
                ts["message"] = r.message
        status["assignment"] = assignment
        if lags:
            status["lag"] = _lag_text(max(lags))
    elif existing.get("assignment"):
        status["assignment"] = dict(existing["assignment"])
    if existing.get("adoptedOffsets"):
        status["adoptedOffsets"] = dict(existing["adoptedOffsets"])
    elif adopted is not None and p.generation is not None:
        status["adoptedOffsets"] = adoption_to_status(adopted)
    return status


def reshard_events(existing: Sequence[JsonMapping] | None, p: Plan) -> tuple[Event, ...]:
    """An event for each step of following a reshard: the ``Resharding`` condition's transitions.

    The planner has no memory of "awaiting the journal" (the generation record does not change
    while it waits), so the steps are read off the stored condition: becoming True or changing
    reason (detected, journal reached, new generation started), and returning to False.
    """
    new = next((c for c in p.conditions if c.type == cond.RESHARDING), None)
    if new is None:
        return ()
    old = cond.find(existing, cond.RESHARDING) or {}
    was = old.get("status") == "True"
    if new.status and (not was or old.get("reason") != new.reason):
        return (Event("Normal", "Resharding", new.message),)
    if was and not new.status and p.generation is not None:
        g = p.generation
        return (Event("Normal", "ReshardCompleted", f"generation {g.generation} streams {len(g.shards)} shards: "
                      f"{', '.join(g.shards)}"),)
    return ()


def _owned(existing: JsonMapping) -> JsonObject:
    """``existing`` restricted to the keys we write, so foreign status keys never show up as a diff."""
    owned = ("observedGeneration", "conditions", "selector", "shards", "assignment", "lag", "adoptedOffsets",
             "backfills")
    return {k: existing[k] for k in owned if k in existing}


# --- the reconcile ------------------------------------------------------------------------------------


def _label_number(obj: JsonMapping, key: str) -> int | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    try:
        return int(labels[key])
    except (KeyError, TypeError, ValueError):
        return None


def _gen_task(obj: JsonMapping) -> tuple[int, int] | None:
    generation, task = _label_number(obj, naming.LABEL_GENERATION), _label_number(obj, naming.LABEL_TASK)
    return None if generation is None or task is None else (generation, task)


def completes_transition(pods: Iterable[PodSummary], changed: PodSummary, deleted: bool,
                         expected: int | None = None) -> bool:
    """Whether a worker pod's event ends a step the planner waits on, so the connector is reconciled
    now instead of at the next resync (which bounds scale -> new generation otherwise): the last
    pod of a generation is gone (a drain finished: the next generation may start), or every pod
    of the pod's generation is Running and ready and no older generation's pod is left (the new
    generation is up: Ready can be said). ``pods``: the connector's worker pods (the index);
    ``changed`` replaces its own entry there, ``deleted`` removes it. ``expected``: how many pods
    of ``changed``'s generation the last plan runs (None: not known). Fewer up is not "every pod
    up": pods are created one by one, and without the count each pod up while the rest did not
    exist yet looked like the last one (issue 30: at 1,024 shards a dozen reconciles of ~4 s each
    were kicked that way, and the one that mattered queued behind them)."""
    gen = changed.generation
    up_count = 1  # ``changed`` itself, in the "up" case

    def up(p: PodSummary) -> bool:
        return p.ready and p.phase == "Running" and not p.deleting

    if not deleted and not up(changed):
        return False
    # One pass that stops at the first pod still in the way: a generation of N pods sends ~N
    # events, and building the index's list anew for each was O(N²) per scale (issue 30: 1,024 shards).
    for p in pods:
        if p.name == changed.name:
            continue
        if deleted and p.generation == gen:
            return False  # the drain goes on
        if not deleted and (p.generation < gen or (p.generation == gen and not up(p))):
            return False  # an older worker is left, or one of this generation is not up yet
        up_count += p.generation == gen
    return deleted or expected is None or up_count >= expected


def draining_generation(current: Generation | None) -> int | None:
    """The recorded generation while its workers are being stopped (draining, or paused or stopped
    during a drain): its Deployments may be gone (``Plan.drain_whole``) while its workers still
    run, and those are its tasks, not strays; a stop is clean only once they have exited (pure).
    Running, a worker pod without its Deployment stays a stray (deleted with ``--cascade=orphan``)."""
    if current is None or current.phase is GenPhase.RUNNING:
        return None
    return current.generation


def observed_tasks(deployments: Iterable[JsonMapping], pods: Iterable[PodSummary], draining: int | None
                   ) -> list[tuple[int, int, int]]:
    """(generation, task, replicas) of every task to report: each Deployment's, and the draining
    generation's tasks that have pods left but no Deployment (pure)."""
    tasks = {key: int((dep.get("spec") or {}).get("replicas") or 0)
             for dep in deployments if (key := _gen_task(dep)) is not None}
    for pod in pods:
        if pod.generation == draining:
            tasks.setdefault((pod.generation, pod.task), 0)
    return [(gen, task, replicas) for (gen, task), replicas in sorted(tasks.items())]


async def _observe_tasks(
    ctx: ReconcileContext, pods: Sequence[PodSummary], tasks: Iterable[tuple[int, int, int]]
) -> list[TaskReport]:
    # Grouped once: a scan of every pod per Deployment was O(N²) per reconcile (issue 30: 1,024 shards).
    by_task: dict[tuple[int, int], list[PodSummary]] = {}
    for pod in pods:
        by_task.setdefault((pod.generation, pod.task), []).append(pod)

    async def one(generation: int, task: int, replicas: int) -> TaskReport:
        mine = by_task.get((generation, task), [])
        live = [p for p in mine if p.phase == "Running" and not p.deleting]
        doc = await fetch_status(ctx.http, live[0]) if live else None
        return task_report(generation, task, replicas, mine, doc)

    return list(await asyncio.gather(*(one(*t) for t in tasks)))


async def _refused_by_policy(ctx: ReconcileContext, body: JsonMapping, existing_status: JsonMapping,
                             now: _dt.datetime) -> bool:
    """The operator's policy refuses the spec: nothing is created, patched or started for it;
    workers of an earlier accepted spec are left as they were."""
    refused = ctx.policy.violations(body.get("spec") or {}) if ctx.policy is not None else []
    if not refused:
        return False
    message = "refused by the operator's policy: " + "; ".join(refused)
    key = f"{POLICY_REFUSED}:{message}"  # once per refused spec, not on every resync
    if key not in ctx.warned:
        ctx.emit(body, "Warning", POLICY_REFUSED, message)
    ctx.warned.clear()
    ctx.warned.add(key)
    await _refuse(ctx, body, existing_status, now, POLICY_REFUSED, message)
    return True


def _emit_events(ctx: ReconcileContext, body: JsonMapping, events: Iterable[Event]) -> None:
    """Emit the plan's events; a warning once per standing reason (strays once per set of pods:
    another set is news), not on every resync."""
    standing: set[str] = set()
    for ev in events:
        if ev.type == "Warning":
            key = f"{ev.reason}:{ev.message}" if ev.reason == STRAY_REASON else ev.reason
            standing.add(key)
            if key in ctx.warned:
                continue
        ctx.emit(body, ev.type, ev.reason, ev.message)
    ctx.warned.clear()
    ctx.warned.update(standing)


async def reconcile(ctx: ReconcileContext, namespace: str, name: str) -> Plan | None:
    """Reconcile one connector; returns the plan carried out (None if the connector is gone or invalid)."""
    kube = ctx.kube
    body = await kube.get_connector(namespace, name)
    if body is None or (body.get("metadata") or {}).get("deletionTimestamp"):
        return None
    existing_status: JsonMapping = body.get("status") or {}
    now = ctx.clock()
    try:
        cr = ConnectorResource.from_body(body)
    except SpecError as exc:
        # The CRD rejects most mistakes; this is for what a schema cannot express.
        await _refuse(ctx, body, existing_status, now, "InvalidSpec", str(exc))
        return None
    if await _refused_by_policy(ctx, body, existing_status, now):
        return None

    (discovery, source_error), deployments, config_maps = await asyncio.gather(
        _discover(ctx, cr),
        kube.list_children(DEPLOYMENTS, namespace, name),
        # ConfigMaps as metadata only: their applied hash is all _apply reads of them, and their
        # data (every task's properties) was most of the bytes a reconcile listed.
        kube.list_children(CONFIG_MAPS, namespace, name, metadata_only=True),
    )  # at once: one after the other, ~20 ms of the ~120 ms before a start's first creation at 256 tasks
    current = generation_from_status(existing_status.get("assignment"))
    draining = draining_generation(current)
    # One snapshot of the pod index for the reports and the stray check.
    pods = list(ctx.pods(namespace, name))
    tasks = observed_tasks(deployments, pods, draining)
    reports = await _observe_tasks(ctx, pods, tasks)
    adopted = adoption_from_status(existing_status.get("adoptedOffsets"))
    offsets_error = ""
    if current is None and adopted is None and cr.spec.state is State.RUNNING and discovery is not None \
            and discovery.serving:
        # About to start the first generation: which offsets exist already (once; recorded with it).
        try:
            adopted = await ctx.scan_offsets(cr, await kafka_access(cr, kube.read_secret))
        except OffsetScanError as exc:
            offsets_error = str(exc)
    p = plan(cr.spec, discovery.serving if discovery is not None else None, current, reports,
             source_error=source_error, adopted=adopted if current is None else None, offsets_error=offsets_error)

    if ctx.expect is not None and p.generation is not None:
        planned = p.generation.generation
        ctx.expect(namespace, name, planned, sum(1 for w in p.workers if w.run and w.generation == planned))
    strays = stray_pods(pods, [(g, t) for g, t, _ in tasks])
    stray_events = (Event("Warning", STRAY_REASON, _stray_message(strays)),) if strays else ()
    lost = await _offsets_lost(ctx, body, cr, p, reports)
    _emit_events(ctx, body, (*p.events, *reshard_events(existing_status.get("conditions"), p), *stray_events,
                             *filter(None, (lost.event,))))
    recorded = await _record_ahead(ctx, body, existing_status, p, adopted)
    await _apply(ctx, body, cr, p, deployments, config_maps)
    if ctx.network_policy is not None and p.workers:
        outcome = await ensure_network_policy(kube, cr, ctx.network_policy)
        if outcome != "unchanged":
            ctx.emit(body, "Normal", outcome.capitalize(), f"{outcome} NetworkPolicy {network_policy_name(cr.name)}")
    await _restart(ctx, body, cr, p)
    wanted = build_status(cr, existing_status, p, discovery, reports, now, adopted)
    if backfill.needs_reconcile(cr, existing_status):
        entries, bf_cond = await backfill.reconcile_backfills(kube, cr, existing_status, cond.format_time(now),
                                                              access=await kafka_access(cr, kube.read_secret))
        wanted["backfills"] = entries
        wanted["conditions"] = cond.merge_conditions(wanted["conditions"], (bf_cond,),
                                                     observed_generation=cr.generation, now=now)
    if lost.condition:
        wanted["conditions"] = cond.merge_conditions(wanted["conditions"], lost.condition,
                                                     observed_generation=cr.generation, now=now)
    if strays:
        wanted["conditions"] = cond.merge_conditions(
            wanted["conditions"], (cond.ConditionSpec(cond.DEGRADED, True, STRAY_REASON, _stray_message(strays)),),
            observed_generation=cr.generation, now=now)
    await _write_status(ctx, body, recorded, wanted)
    await _remove(ctx, body, cr, p, deployments, config_maps)
    return p


async def _discover(ctx: ReconcileContext, cr: ConnectorResource) -> tuple[Discovery | None, str]:
    """The source's shards, or None and why they could not be read."""
    try:
        if ctx.discover is not None:
            return await ctx.discover(cr), ""
        return await discover_source(ctx.kube, cr, ctx.discovery_timeout), ""
    except DiscoveryError as exc:
        return None, str(exc)


async def _offsets_lost(ctx: ReconcileContext, body: JsonMapping, cr: ConnectorResource, p: Plan,
                        reports: Sequence[TaskReport]) -> LostTasks:
    """Issue 28, case 7 (``cdcoperator.offsetslost``): tasks whose stored offsets vanished."""
    # No generation record yet (first start, or cleared by an offsets reset): nothing is expected,
    # even if this reconcile starts generation 0 again.
    g = p.generation if (body.get("status") or {}).get("assignment") else None
    reporting = [r.task_id for r in reports if g is not None and r.generation == g.generation and r.position
                 and r.phase in (TaskPhase.STREAMING, TaskPhase.SNAPSHOTTING)]
    return await settle_offsets_lost(ctx.kube, ctx.emit, body, cr, g, list(ctx.pods(cr.namespace, cr.name)),
                                     reporting, restart_stamp(ctx.clock()))


STRAY_REASON = "StrayWorkers"
POLICY_REFUSED = "PolicyRefused"


async def _refuse(ctx: ReconcileContext, body: JsonMapping, existing: JsonMapping, now: _dt.datetime,
                  reason: str, message: str) -> None:
    """Record a spec the operator will not act on: Ready False and Degraded True, with ``reason``."""
    bad = (cond.ConditionSpec(cond.READY, False, reason, message), cond.ConditionSpec(cond.DEGRADED, True, reason, message))
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    wanted = dict(_owned(existing))
    wanted["conditions"] = cond.merge_conditions(existing.get("conditions"), bad, observed_generation=generation, now=now)
    wanted["observedGeneration"] = generation
    await _write_status(ctx, body, existing, wanted)


def _stray_message(strays: Sequence[PodSummary]) -> str:
    names = ", ".join(f"{p.name} (generation {p.generation}, task {p.task})" for p in strays)
    return (f"worker pod(s) {names} run without their task's Deployment: they may stream their shards beside the "
            "current workers and write offsets under an old task key; delete them (kubectl delete pod ...)")


async def _record_ahead(
    ctx: ReconcileContext, body: JsonMapping, existing: JsonMapping, p: Plan, adopted: Adoption | None
) -> JsonMapping:
    """Store a changed generation record before acting on it (a write-ahead record); returns the
    status as it is now (the final write is a merge patch against it).

    Acting removes what the plan was made from: the pods of workers that stopped at a reshard
    journal (their termination messages hold it) and the previous generation's Deployments. Were
    the status write after acting lost, the next reconcile would plan from the old record without
    them: the journal gone for good (waiting for it for ever), or a second generation with the same
    number beside the one that runs. If this write fails, nothing has been acted on.
    """
    if p.generation is None:
        return existing
    old = existing.get("assignment") or {}
    current = generation_from_status(old)
    g = p.generation
    if current is not None and current.generation == g.generation and current.pending == g.pending:
        return existing  # a phase change of the same generation: nothing acting on it removes
    record = generation_to_status(g)
    if current is not None and current.generation == g.generation:
        # Draining the same generation: its tasks keep what the last full write said of them
        # (phase, pod, position), so readers never see them blank between the two writes.
        said = {t.get("id"): t for t in old.get("taskStates") or ()}
        states = cast(list[dict[str, Any]], record["taskStates"])
        record["taskStates"] = [{**said.get(t["id"], {}), **t} for t in states]
    # A merge patch from the stored record: keys the new record lacks (a finished drain's
    # ``pending``, older ``journalPositions``) are removed, not left beside it.
    ahead: JsonObject = {"assignment": merge_patch(old, record)}
    after = {**existing, "assignment": record}
    if adopted is not None and not existing.get("adoptedOffsets"):
        ahead["adoptedOffsets"] = after["adoptedOffsets"] = adoption_to_status(adopted)  # the first generation's
    meta = body["metadata"]
    await ctx.kube.patch_connector_status(meta["namespace"], meta["name"], ahead)
    return after


async def _write_status(
    ctx: ReconcileContext, body: JsonMapping, existing: JsonMapping, wanted: JsonMapping
) -> None:
    patch = merge_patch(_owned(existing), wanted)
    if not patch:
        return
    meta = body["metadata"]
    await ctx.kube.patch_connector_status(meta["namespace"], meta["name"], patch)


async def _apply(
    ctx: ReconcileContext,
    body: JsonMapping,
    cr: ConnectorResource,
    p: Plan,
    deployments: Sequence[JsonMapping],
    config_maps: Sequence[JsonMapping],
) -> None:
    kube = ctx.kube
    live_deps = {d["metadata"]["name"]: d for d in deployments}
    live_cms = {c["metadata"]["name"]: c for c in config_maps}
    # One event per kind of change and reconcile, naming the objects, not one per object: a
    # generation of 1,024 tasks made ~3,000 Event writes per scale, as many as its object writes.
    changes: dict[tuple[str, str], list[str]] = {}

    drained = p.drain_whole

    async def drain_whole(generation: int) -> None:
        names = await kube.delete_generation(DEPLOYMENTS, cr.namespace, cr.name, generation,
                                             _tasks_of(generation, deployments))
        what = f"deleted the Deployments of generation {generation} to drain it (its ConfigMap stays until every worker has exited)"
        changes.setdefault(("StoppedWorker", what), []).extend(names)

    def change(outcome: str, obj: JsonMapping, live: JsonMapping | None, what: str = "") -> None:
        if outcome == "unchanged":
            return
        name = obj["metadata"]["name"]
        if obj["kind"] == "Deployment" and live is not None:
            old = int((live.get("spec") or {}).get("replicas") or 0)
            new = int(obj["spec"]["replicas"])
            if old != new:
                key = ("ScaledWorker" if new else "StoppedWorker", f"Deployment replicas {old} -> {new}")
                changes.setdefault(key, []).append(name)
                return
        changes.setdefault((outcome.capitalize(), what or f"{outcome} {obj['kind']}"), []).append(name)

    async def config(generation: int, ahead: bool = False) -> None:
        cm = configs[generation] = build_config_map(cr, generation)
        live = live_cms.get(cm["metadata"]["name"])
        outcome = await kube.apply(cm, live)
        change(outcome, cm, live, f"{outcome} ConfigMap ahead of generation {generation}'s start" if ahead else "")

    async def worker(task: TaskPlan) -> None:
        dep = build_deployment(cr, task, configs[task.generation])
        live = live_deps.get(dep["metadata"]["name"])
        change(await kube.apply(dep, live), dep, live)

    # Each generation's ConfigMap before its Deployments: a pod whose volume is missing waits for
    # the kubelet's retry (backing off) before it starts.
    configs: dict[int, JsonObject] = {}
    workers = [t for t in p.workers if t.generation != drained  # drained: deleted whole (drain_whole)
               and (t.run or naming.task_object_name(cr.name, t.generation, t.task_id) in live_deps)]
    await asyncio.gather(*(config(g) for g in sorted({t.generation for t in workers})))
    drain = [drain_whole(drained)] if drained is not None and drained in _generations(deployments) else []
    await asyncio.gather(*drain, *(worker(t) for t in workers))
    planned = {(t.generation, t.task_id) for t in p.workers}
    await asyncio.gather(*(kube.set_replicas(cr.namespace, naming.task_object_name(cr.name, ref.generation, ref.task_id), 0)
                           for ref in p.stop if (ref.generation, ref.task_id) not in planned))
    # After the drain's replica patches: its workers exit while the next generation's
    # configuration is written (interleaved with them, the drain finished later).
    await asyncio.gather(*(config(g, ahead=True) for g in sorted({t.generation for t in p.prepare} - set(configs))))
    _emit_changes(ctx, body, changes)


def _emit_changes(ctx: ReconcileContext, body: JsonMapping, changes: Mapping[tuple[str, str], Sequence[str]]) -> None:
    for (reason, what), names in changes.items():
        ctx.emit(body, "Normal", reason, change_message(what, names))


async def _remove(ctx: ReconcileContext, body: JsonMapping, cr: ConnectorResource, p: Plan,
                  deployments: Sequence[JsonMapping], config_maps: Sequence[JsonMapping]) -> None:
    """Delete what belongs to generations whose workers have all exited (or configuration no
    Deployment mounts), after the status is written and never in the reconcile that starts a
    generation: nothing waits for it, and the API server deletes a collection's objects one by one
    (1,024 of them beside a start's creations doubled it, issue 30). The next reconcile (the new
    generation's last worker ready, or the resync) finds them in its lists and removes them."""
    if p.action is Action.START:
        return
    changes: dict[tuple[str, str], list[str]] = {}
    await asyncio.gather(*_removals(ctx.kube, cr, p, deployments, config_maps, changes))
    _emit_changes(ctx, body, changes)


def _removals(kube: ClusterApi, cr: ConnectorResource, p: Plan, deployments: Sequence[JsonMapping],
              config_maps: Sequence[JsonMapping], changes: dict[tuple[str, str], list[str]]
              ) -> list[Awaitable[None]]:
    """The deletions ``p`` asks for (exited generations, whole or task by task, and configuration
    written ahead of a start that is not coming), each recording what it deleted in ``changes``."""

    def deleted(what: str, names: Iterable[str]) -> None:
        changes.setdefault(("Deleted", what), []).extend(names)

    async def remove(ref: TaskRef) -> None:
        # The generation's ConfigMap goes with its last Deployment (configs_behind).
        obj_name = naming.task_object_name(cr.name, ref.generation, ref.task_id)
        if await kube.delete(DEPLOYMENTS, cr.namespace, obj_name):
            deleted(f"deleted the Deployment of an exited task of generation {ref.generation}", [obj_name])

    async def remove_generation(generation: int) -> None:
        names = await asyncio.gather(
            kube.delete_generation(DEPLOYMENTS, cr.namespace, cr.name, generation, _tasks_of(generation, deployments)),
            kube.delete_generation(CONFIG_MAPS, cr.namespace, cr.name, generation))
        deleted(f"deleted the Deployments and ConfigMap of generation {generation} (it has exited)",
                sorted(set(names[0]) | set(names[1])))

    async def remove_config(generation: int, what: str) -> None:
        deleted(what, await kube.delete_generation(CONFIG_MAPS, cr.namespace, cr.name, generation))

    whole, single = whole_generations(p.remove, deployments)
    return [*(remove_generation(g) for g in whole), *(remove(r) for r in single),
            *(remove_config(g, f"deleted the ConfigMap of generation {g} (it has exited)")
              for g in configs_behind(p, deployments, config_maps, whole)),
            *(remove_config(g, f"deleted the ConfigMap written ahead of generation {g}, which is not starting")
              for g in configs_ahead(p, deployments, config_maps))]


def whole_generations(remove: Iterable[TaskRef], deployments: Iterable[JsonMapping]
                      ) -> tuple[list[int], list[TaskRef]]:
    """(generations removed whole, the other task refs to remove one by one) (pure). A generation
    is removed whole, by its labels, when every task of it that has a Deployment is to be removed,
    which is how the planner removes (an exited generation, all of it); its ConfigMaps go with it,
    even one whose Deployment is already gone."""
    refs = sorted(set(remove), key=lambda r: (r.generation, r.task_id))
    wanted = {(r.generation, r.task_id) for r in refs}
    kept = {key for key in map(_gen_task, deployments) if key is not None and key not in wanted}
    partial = {gen for gen, _ in kept}
    whole = sorted({r.generation for r in refs} - partial)
    return whole, [r for r in refs if r.generation in partial]


def _generations(objects: Iterable[JsonMapping]) -> set[int]:
    """The generations of the listed objects (a task's Deployment, a generation's ConfigMap)."""
    return {g for obj in objects if (g := _label_number(obj, naming.LABEL_GENERATION)) is not None}


def _tasks_of(generation: int, objects: Iterable[JsonMapping]) -> list[int]:
    """The task ids of ``generation`` among the listed objects (how its deletion is split)."""
    return sorted(key[1] for key in map(_gen_task, objects) if key is not None and key[0] == generation)


def configs_ahead(p: Plan, deployments: Iterable[JsonMapping], config_maps: Iterable[JsonMapping]) -> list[int]:
    """Generations newer than the plan's with ConfigMaps but no Deployment, which the plan does not
    prepare: written ahead during a drain whose change was undone before the start (pure)."""
    if p.generation is None:
        return []
    keep = {t.generation for t in p.prepare} | _generations(deployments)
    return sorted({g for g in _generations(config_maps) if g > p.generation.generation} - keep)


def configs_behind(p: Plan, deployments: Iterable[JsonMapping], config_maps: Iterable[JsonMapping],
                   removed: Iterable[int]) -> list[int]:
    """Generations older than the plan's with ConfigMaps but no Deployment, not removed whole
    already: one drained whole (``Plan.drain_whole``), whose workers have all exited (pure)."""
    if p.generation is None:
        return []
    keep = _generations(deployments) | set(removed)
    return sorted({g for g in _generations(config_maps) if g < p.generation.generation} - keep)


CHANGE_NAMES_LISTED = 10  # an event's message lists this many names, then counts the rest


def change_message(what: str, names: Iterable[str]) -> str:
    """``created Deployment: a, b`` / ``...: a, b, ... and 3 more (13)``: the objects one change touched (pure)."""
    ordered = sorted(names, key=naming_order)
    listed = ", ".join(ordered[:CHANGE_NAMES_LISTED])
    rest = len(ordered) - CHANGE_NAMES_LISTED
    return f"{what}: {listed}" + (f" and {rest} more ({len(ordered)})" if rest > 0 else "")


def naming_order(name: str) -> tuple[str, int]:
    """``c-g1-t10`` after ``c-g1-t9``: task numbers in numeric order."""
    head, _, tail = name.rpartition("-t")
    return (head, int(tail)) if tail.isdigit() else (name, -1)


async def _restart(ctx: ReconcileContext, body: JsonMapping, cr: ConnectorResource, p: Plan) -> None:
    """Honour ``shardcdc.io/restart`` once, then remove it."""
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(naming.RESTART_ANNOTATION)
    if value is None:
        return
    g: Generation | None = p.generation
    if p.action is not Action.KEEP or g is None or cr.spec.state is not State.RUNNING:
        ctx.emit(body, "Warning", "RestartIgnored",
                 f"{naming.RESTART_ANNOTATION}={value!r} ignored: the connector is not running a stable generation "
                 f"({p.action.value})")
    else:
        tasks = parse_restart(value, g.task_count)
        if tasks is None:
            ctx.emit(body, "Warning", "RestartIgnored",
                     f"{naming.RESTART_ANNOTATION}={value!r} is not 'all' or 'task=<id>' with id < {g.task_count}")
        else:
            stamp = restart_stamp(ctx.clock())
            for tid in tasks:
                dep = naming.task_object_name(cr.name, g.generation, tid)
                await ctx.kube.annotate_pod_template(cr.namespace, dep, RESTARTED_AT_ANNOTATION, stamp)
            ctx.emit(body, "Normal", "Restarted",
                     f"restarted task{'s' if len(tasks) != 1 else ''} {', '.join(map(str, tasks))} "
                     f"of generation {g.generation}")
    await ctx.kube.remove_annotation(cr.namespace, cr.name, naming.RESTART_ANNOTATION, value)
