"""What each task's worker is doing: its ``/status`` document, or its pod when the document is unreachable.

Inputs per task: the task's Deployment (desired replicas), the pods of the task (from the operator's index
of pods labelled ``shardcdc.io/connector``, so no API reads), and the worker's status document
(``GET http://<podIP>:<metrics port>/status``, see ``cdcworker.observability.status``). The pure
:func:`task_report` turns them into the planner's :class:`TaskReport`.

Reshard journals reach the operator two ways, both as ``{"journal": {"participants": [shard...],
"positions": [{"shard": s, "gtid": g}...]}}`` (``positions`` may also be a ``{shard: gtid}`` map):
in the status document of a worker in state ``reassignment_needed``, and in the container's
termination message (``/dev/termination-log``) after it exited with status 10, which the kubelet
keeps in ``lastState`` across restarts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import aiohttp
import orjson

from cdcoperator import naming
from cdcoperator.planner import Journal, TaskPhase, TaskReport
from cdcworker import exitcodes
from cdcworker.jsontypes import JsonMapping
from cdcworker.offsets.keys import TaskKey

__all__ = [
    "STATUS_PATH",
    "PodSummary",
    "fetch_status",
    "journal_from",
    "pod_index_key",
    "stray_pods",
    "summarize_pod",
    "task_report",
]

STATUS_PATH = "/status"
STATUS_TIMEOUT = 2.0

_STATES = {
    "starting": TaskPhase.STARTING,
    "reconnecting": TaskPhase.STARTING,
    "snapshotting": TaskPhase.SNAPSHOTTING,
    "streaming": TaskPhase.STREAMING,
    "reassignment_needed": TaskPhase.REASSIGNMENT_NEEDED,
    "failed": TaskPhase.FAILED,
    "stopped": TaskPhase.EXITED,
    "completed": TaskPhase.COMPLETED,
}
_CRASH_REASONS = frozenset({"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError",
                            "InvalidImageName", "CreateContainerError", "RunContainerError"})


@dataclass(frozen=True, slots=True)
class PodSummary:
    """The few fields of a worker pod the operator needs (kept in the pod index, ``cdcoperator.podwatch``)."""

    name: str
    generation: int
    task: int
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    deleting: bool
    ip: str | None
    port: int | None  # the container port named "metrics"
    ready: bool
    waiting_reason: str | None
    exit_code: int | None  # of the current run if terminated, else of the previous one
    termination_message: str
    restarts: int
    unschedulable: str | None = None  # the scheduler's message while PodScheduled is False (Unschedulable)


def stray_pods(pods: Iterable[PodSummary], tasks: Iterable[tuple[int, int]]) -> list[PodSummary]:
    """Worker pods still running whose task has no Deployment (pure).

    Every worker pod belongs to a task Deployment the operator made. One without it (deleted with
    ``--cascade=orphan``, a ReplicaSet or pod copied by hand) streams its shards under an old task
    key beside the current workers, and the operator would never see it otherwise."""
    known = set(tasks)
    return sorted((p for p in pods if (p.generation, p.task) not in known and not p.deleting
                   and p.phase in ("Pending", "Running")), key=lambda p: p.name)


def pod_index_key(namespace: str, connector: str) -> tuple[str, str]:
    return (namespace, connector)


def summarize_pod(body: JsonMapping) -> PodSummary | None:
    """A summary of a worker pod (None if its labels do not name a generation and a task)."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    try:
        generation = int(labels[naming.LABEL_GENERATION])
        task = int(labels[naming.LABEL_TASK])
    except (KeyError, TypeError, ValueError):
        return None
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    port = None
    for container in spec.get("containers") or ():
        for p in container.get("ports") or ():
            if p.get("name") == "metrics":
                port = int(p["containerPort"])
    waiting = None
    exit_code = None
    message = ""
    ready = False
    restarts = 0
    for cs in status.get("containerStatuses") or ():
        ready = ready or bool(cs.get("ready"))
        restarts += int(cs.get("restartCount") or 0)
        state = cs.get("state") or {}
        if "waiting" in state:
            waiting = (state["waiting"] or {}).get("reason")
        term = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term:
            exit_code = int(term.get("exitCode", 0))
            message = str(term.get("message") or "")
    unschedulable = next((str(c.get("message") or c.get("reason") or "Unschedulable")
                          for c in status.get("conditions") or ()
                          if c.get("type") == "PodScheduled" and c.get("status") == "False"
                          and c.get("reason") == "Unschedulable"), None)
    return PodSummary(
        name=str(meta.get("name")),
        generation=generation,
        task=task,
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        ip=status.get("podIP") or None,
        port=port,
        ready=ready,
        waiting_reason=waiting,
        exit_code=exit_code,
        termination_message=message,
        restarts=restarts,
        unschedulable=unschedulable,
    )


def journal_from(doc: JsonMapping | None) -> Journal | None:
    """The reshard journal in a status document or termination message, if any."""
    raw = (doc or {}).get("journal")
    if not isinstance(raw, Mapping):
        return None
    positions_raw = raw.get("positions") or {}
    if isinstance(positions_raw, Mapping):
        positions = {str(k): str(v) for k, v in positions_raw.items()}
    else:
        positions = {str(p.get("shard")): str(p.get("gtid") or "") for p in positions_raw}
    participants = [str(s) for s in raw.get("participants") or ()]
    if not participants or not positions:
        return None
    return Journal.of(participants, positions)


def _parse_json(text: str) -> JsonMapping | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


def _exit_error(pod: PodSummary) -> str:
    """``: <reason>`` when the worker left one in its termination message (refused credentials...)."""
    error = (_parse_json(pod.termination_message) or {}).get("error")
    return f": {error}" if error else ""


def _position(doc: JsonMapping) -> str | None:
    parts = []
    for s in doc.get("shards") or ():
        gtid = s.get("durable_gtid") or s.get("gtid")
        if gtid:
            parts.append(f"{s.get('shard')}@{gtid}")
    return ";".join(parts) or None


def _lag(doc: JsonMapping) -> int | None:
    lag = doc.get("low_watermark_lag_ms")
    if isinstance(lag, int):
        return lag
    lags = [s["lag_ms"] for s in doc.get("shards") or () if isinstance(s.get("lag_ms"), int)]
    return max(lags) if lags else None


def task_report(
    generation: int,
    task_id: int,
    replicas: int,
    pods: Sequence[PodSummary],
    doc: JsonMapping | None,
) -> TaskReport:
    """One task's observed phase. ``doc`` is its status document (None when unreachable)."""
    alive = sorted((p for p in pods if p.phase not in ("Succeeded", "Failed")), key=lambda p: (p.deleting, p.name))
    pod = alive[0] if alive else (sorted(pods, key=lambda p: p.name)[0] if pods else None)

    def report(phase: TaskPhase, message: str = "", journal: Journal | None = None, running: bool = False) -> TaskReport:
        return TaskReport(
            generation,
            task_id,
            phase,
            pod=pod.name if pod is not None else None,
            position=_position(doc) if doc else None,
            lag_ms=_lag(doc) if doc else None,
            journal=journal,
            message=message,
            running=running,
        )

    if pod is None:
        # No pod: scaled to zero and gone (exited), or not scheduled yet.
        return report(TaskPhase.EXITED if replicas == 0 else TaskPhase.PENDING)
    if pod.exit_code == exitcodes.REASSIGNMENT_NEEDED and (not alive or not pod.ready):
        journal = journal_from(_parse_json(pod.termination_message)) or journal_from(doc)
        # A restarted container (alive, not ready) still runs a process of this generation.
        return report(TaskPhase.REASSIGNMENT_NEEDED, "worker stopped at a reshard journal", journal, running=bool(alive))
    if not alive:
        return report(TaskPhase.EXITED if replicas == 0 or pod.exit_code == 0 else TaskPhase.FAILED,
                      f"worker exited with status {pod.exit_code}{_exit_error(pod)}" if pod.exit_code else "")
    if doc is not None:
        state = str(doc.get("state") or "")
        phase = _STATES.get(state, TaskPhase.STARTING)
        if phase is TaskPhase.REASSIGNMENT_NEEDED:
            return report(phase, str(doc.get("reason") or "worker stopped at a reshard journal"), journal_from(doc),
                          running=True)  # it serves its document: the process is still there
        return report(phase, str(doc.get("reason") or "") if phase is TaskPhase.FAILED else "")
    # The document is unreachable: judge from the pod alone.
    if pod.waiting_reason in _CRASH_REASONS:
        return report(TaskPhase.FAILED, f"{pod.waiting_reason} (exit status {pod.exit_code}){_exit_error(pod)}"
                      if pod.exit_code is not None else str(pod.waiting_reason))
    if pod.phase == "Pending" and pod.unschedulable:
        # Never started (no room, a nodeSelector no node matches, a taint): nothing streams these
        # shards, which is a failure to report, not a phase to wait in.
        return report(TaskPhase.FAILED, f"pod cannot be scheduled: {pod.unschedulable}")
    if pod.phase == "Running":
        # Ready means snapshotting or streaming (the worker's /readyz); without the document we
        # cannot tell which, and streaming is the steady state.
        return report(TaskPhase.STREAMING if pod.ready else TaskPhase.STARTING)
    return report(TaskPhase.PENDING)


async def fetch_status(
    session: aiohttp.ClientSession, pod: PodSummary, timeout: float = STATUS_TIMEOUT
) -> JsonMapping | None:
    """The pod's status document, or None when it cannot be had (no IP yet, refused, timeout, junk)."""
    if not pod.ip or not pod.port or pod.phase != "Running":
        return None
    host = f"[{pod.ip}]" if ":" in pod.ip else pod.ip
    try:
        async with session.get(f"http://{host}:{pod.port}{STATUS_PATH}",
                               timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                return None
            doc = await resp.json(content_type=None, loads=orjson.loads)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None
    return doc if isinstance(doc, Mapping) and belongs_to(pod, doc) else None


def belongs_to(pod: PodSummary, doc: JsonMapping) -> bool:
    """Whether a status document is this pod's worker's: another process answering on its address
    (a port taken over in local mode, an IP reused) must not pass its shards off as this task's."""
    generation = doc.get("generation")
    if isinstance(generation, int) and generation != pod.generation:
        return False
    try:
        key = TaskKey.parse(str(doc.get("task") or ""))
    except ValueError:  # no task key (a single-task worker): nothing to tell apart
        return True
    return (key.task_id, key.gen) == (pod.task, pod.generation)


def pods_of(index_values: Iterable[PodSummary], generation: int, task_id: int) -> list[PodSummary]:
    return [p for p in index_values if p.generation == generation and p.task == task_id]
