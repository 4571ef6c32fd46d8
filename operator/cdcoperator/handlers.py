"""kopf glue: every handler and the timer call the same idempotent ``reconcile()``.

kopf's create/update/delete handlers are edge-based (``docs/critiques.rst``); the level-based
remedy (``docs/reconciliation.rst``) is what this module does: create, update and resume only
trigger an immediate reconcile, and a timer re-runs it every ``SHARDCDC_OPERATOR_RESYNC_SECONDS``
so that workers exiting, pods appearing and Vitess resharding are picked up without any event on
the CdcConnector itself. A worker pod's event that completes a drain or a new generation's start
reconciles its connector at once (``_kick``), so a scale does not wait for the timer. A
per-connector lock serialises the timer with the handlers and those kicks; a timer pass or kick
that a reconcile begun after it was asked for has served is dropped (``_run``). Worker pods are held in
an index fed by one plain watch per namespace (``cdcoperator.podwatch``, not kopf's per-event
handler machinery), so observing tasks costs no API reads.

Settings production needs are set in :func:`configure` (with the reasons next to them).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import weakref
from typing import Any

import aiohttp
import kopf

from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS, PLURAL, ApiError, KubeApi, new_api_client
from cdcoperator.discovery import DEFAULT_TIMEOUT
from cdcoperator.model import GROUP, VERSION, ConnectorResource, DeletionPolicy, SpecError
from cdcoperator.networkpolicy import load_network_policy
from cdcoperator.planner import Plan
from cdcoperator.podwatch import PodWatch
from cdcoperator.policy import load_policy
from cdcoperator.reconcile import ReconcileContext, reconcile
from cdcoperator.serialrun import Served
from cdcworker.jsontypes import JsonMapping

__all__ = ["RESYNC_SECONDS", "STORAGE_PREFIX", "configure"]

log = logging.getLogger("cdcoperator")

# Read at import: kopf's timer interval is fixed when the handler is registered.
RESYNC_SECONDS = float(os.environ.get("SHARDCDC_OPERATOR_RESYNC_SECONDS", "10"))
REQUEST_TIMEOUT = float(os.environ.get("SHARDCDC_OPERATOR_REQUEST_TIMEOUT", "30"))
DISCOVERY_TIMEOUT = float(os.environ.get("SHARDCDC_OPERATOR_DISCOVERY_TIMEOUT", str(DEFAULT_TIMEOUT)))
RETRY_DELAY = 5.0
# How long kopf waits for a resync timer's reconcile in flight to finish when the connector is deleted.
INSTANT_EXIT_TIMEOUT = DISCOVERY_TIMEOUT + 5.0
# kopf's own bookkeeping (progress, last-handled configuration) lives under a sub-domain of ours.
# Not ``shardcdc.io`` itself: kopf drops annotations under its storage prefix from the diff it
# computes, and then ``shardcdc.io/restart`` would never trigger the update handler.
STORAGE_PREFIX = f"operator.{naming.PREFIX}"
RESOURCE = (GROUP, VERSION, PLURAL)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: object) -> None:
    settings.persistence.finalizer = naming.FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=STORAGE_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=STORAGE_PREFIX, key="last-handled-configuration"
    )
    # Watch streams can go silent without an error (kopf #585, #698, #810): the server ends each
    # watch after server_timeout, and the client gives up slightly later if it does not.
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = REQUEST_TIMEOUT
    settings.networking.connect_timeout = 10
    # One active operator, no peering: the chart runs a single replica with strategy Recreate, so
    # two operators never overlap. kopf's peering is active/passive with a ~60 s failover, freezes
    # every instance when priorities tie (kopf #51), and needs cluster-wide RBAC on its peering
    # resources; generations need exactly one writer, which a single Recreate replica already gives.
    settings.peering.standalone = True
    # The CRD is installed before the operator; watching CRDs and namespaces for changes would
    # only need more RBAC (list/watch on cluster-scoped objects) for nothing.
    settings.scanning.disabled = True
    # Our own events are explicit; kopf's per-handler "succeeded" log events would drown them.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 4
    # Deletion: kopf stops the resync timer first and removes the finalizer only once it has exited.
    # A timer caught mid-reconcile (it finishes what it started: its API calls run in threads and
    # cannot be abandoned halfway) is not done within kopf's default "instant exit" of 10 event-loop
    # cycles; kopf then re-checked it only after cancellation_polling (60 s) with nothing else
    # touching the object meanwhile, so the finalizer stayed for a minute after the delete handler
    # had succeeded. Wait for the reconcile in flight instead (bounded; the delete handler would wait
    # for it on the lock anyway), and past that bound re-check every second. Also on operator exit.
    settings.background.instant_exit_timeout = INSTANT_EXIT_TIMEOUT
    settings.background.cancellation_polling = 1.0
    kubeconfig = os.environ.get("SHARDCDC_OPERATOR_KUBECONFIG")
    memo.kube = KubeApi(new_api_client(kubeconfig), REQUEST_TIMEOUT)
    memo.pods = PodWatch(lambda: new_api_client(kubeconfig), lambda ns, name: _kick(memo, ns, name))
    memo.kicks = {}  # (namespace, connector) -> the kicked reconcile not started yet (_kick)
    memo.kicked = set()  # every kicked reconcile not done yet, started or not (cancelled at exit)
    memo.served = Served()  # when each connector's last completed reconcile began (_run)
    memo.warned = {}  # (namespace, connector) -> reasons of standing warnings (ReconcileContext.warned)
    memo.http = aiohttp.ClientSession()
    memo.policy = load_policy()  # $SHARDCDC_OPERATOR_POLICY (the chart's policy values); None: unrestricted
    memo.network_policy = load_network_policy()  # $SHARDCDC_OPERATOR_NETWORK_POLICY; None: no workers' policy
    memo.stats = {"reconciles": 0}  # shared by every per-object memo (they are shallow copies)


@kopf.on.cleanup()
async def close(memo: kopf.Memo, **_: object) -> None:
    pods = memo.get("pods")
    if pods is not None:
        pods.close()  # no more kicks
    # Kicked reconciles end before the clients they use close: one in flight at exit found the
    # API client's pool shut ("cannot schedule new futures after shutdown").
    kicked = list(memo.get("kicked") or ())
    for task in kicked:
        task.cancel()
    await asyncio.gather(*kicked, return_exceptions=True)
    http = memo.get("http")
    if http is not None:
        await http.close()
    kube = memo.get("kube")
    if kube is not None:
        kube.close()


@kopf.on.probe(id="reconciles")
def probe(memo: kopf.Memo, **_: object) -> int:
    """Liveness detail: reconciles completed since start (the endpoint itself is ``--liveness``)."""
    return int(memo.stats["reconciles"])


def _emit(body: JsonMapping, type_: str, reason: str, message: str) -> None:
    kopf.event(body, type=type_, reason=reason, message=message[:1024])  # type: ignore[arg-type]


def _context(memo: kopf.Memo, namespace: str, name: str) -> ReconcileContext:
    pods: PodWatch = memo.pods
    return ReconcileContext(kube=memo.kube, http=memo.http, emit=_emit, pods=pods.indexed,
                            discovery_timeout=DISCOVERY_TIMEOUT, warned=memo.warned.setdefault((namespace, name), set()),
                            policy=memo.get("policy"), network_policy=memo.get("network_policy"),
                            expect=pods.expect)


# One lock per connector, shared by its handlers, its timer and its worker pods' events (kopf's
# memo is per object, and a pod's is not its connector's); per event loop, as kopf may run more
# than once in a process (tests).
_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str], asyncio.Lock]] = \
    weakref.WeakKeyDictionary()


def _lock(namespace: str, name: str) -> asyncio.Lock:
    locks = _LOCKS.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault((namespace, name), asyncio.Lock())


async def _run(memo: kopf.Memo, namespace: str, name: str, stopped: object = None, why: str = "changed",
               coalesce: bool = False) -> None:
    """One reconcile under the connector's lock; ``coalesce`` (the timer, pod kicks): skipped when a
    reconcile begun after it was asked for has completed meanwhile (``cdcoperator.serialrun``)."""
    await memo.pods.pods(namespace, name)  # the namespace's pods listed: never plan from an empty index
    key = (namespace, name)
    served: Served = memo.served
    asked = time.monotonic()

    async def once() -> Plan | None:
        try:
            return await reconcile(_context(memo, namespace, name), namespace, name)
        except (ApiError, aiohttp.ClientError, OSError) as exc:
            raise kopf.TemporaryError(f"reconcile failed: {exc}", delay=RETRY_DELAY) from exc

    # ``stopped``: the timer was stopped (deletion, operator exit) while waiting for the lock.
    # A kick from the moment it starts on asks for another reconcile (``_kick``).
    ran, p = await served.run(key, _lock(namespace, name), once, coalesce=coalesce, stopped=lambda: bool(stopped),
                              starting=lambda: memo.kicks.pop(key, None))
    if ran:
        log.debug("%s/%s reconciled (%s): %s, %.2f s after it was asked for", namespace, name, why,
                  p.action.value if p is not None else "nothing", time.monotonic() - asked)
        memo.stats["reconciles"] += 1


def _kick(memo: kopf.Memo, namespace: str, name: str) -> None:
    """A drain's last worker gone, or a new generation's last worker ready (``podwatch``): reconcile
    the connector now rather than at its next resync. One kicked reconcile waits at most: more
    kicks before it starts are served by it (it reads everything afresh)."""
    key = (namespace, name)
    if key in memo.kicks:
        return
    memo.kicks[key] = task = asyncio.create_task(_kicked(memo, namespace, name))
    memo.kicked.add(task)
    task.add_done_callback(lambda _: memo.kicks.get(key) is task and memo.kicks.pop(key))
    task.add_done_callback(memo.kicked.discard)


async def _kicked(memo: kopf.Memo, namespace: str, name: str) -> None:
    try:
        await _run(memo, namespace, name, why="kicked", coalesce=True)
    except kopf.TemporaryError as exc:  # the resync timer tries again
        log.warning("%s/%s: %s", namespace, name, exc)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE)
async def changed(memo: kopf.Memo, namespace: str | None, name: str, **kwargs: Any) -> None:  # Any: kopf's keyword arguments, passed on as kopf gives them
    await _run(memo, namespace or "default", name)


@kopf.timer(*RESOURCE, interval=RESYNC_SECONDS)
async def resync(memo: kopf.Memo, namespace: str | None, name: str, **kwargs: Any) -> None:  # Any: kopf's keyword arguments, passed on as kopf gives them
    # ``stopped`` (kopf.DaemonStopped) is set when the deletion starts: no reconcile may begin after that (reconcile()
    # also returns early on a deletionTimestamp; one already running completes under the lock,
    # before the delete handler lists the children it removes).
    await _run(memo, namespace or "default", name, kwargs["stopped"], why="resync", coalesce=True)
    if not kwargs["stopped"] and _offsets.has_offsets_annotation(kwargs["body"]):
        await _offsets.process_offsets_annotation(memo, namespace or "default", name)


@kopf.on.delete(*RESOURCE)
async def deleted(memo: kopf.Memo, body: kopf.Body, namespace: str | None, name: str, **kwargs: Any) -> None:  # Any: kopf's keyword arguments, passed on as kopf gives them
    """Remove every child explicitly (a cluster without garbage collection still ends clean).

    With ``DeleteOffsets`` the records are tombstoned only once no worker pod is left: a worker
    still shutting down commits its offsets last and would resurrect them.
    """
    kube: KubeApi = memo.kube
    namespace = namespace or "default"
    async with _lock(namespace, name):
        removed: list[str] = []
        for kind in (DEPLOYMENTS, CONFIG_MAPS):
            for obj in await kube.list_children(kind, namespace, name, metadata_only=True):
                if await kube.delete(kind, namespace, obj["metadata"]["name"]):
                    removed.append(f"{kind.plural}/{obj['metadata']['name']}")
        _emit(body, "Normal", "Deleted", f"removed {len(removed)} worker objects: {', '.join(removed) or 'none'}")
        try:
            policy = ConnectorResource.from_body(body).spec.deletion_policy
        except SpecError:
            policy = DeletionPolicy.RETAIN
        if policy is DeletionPolicy.DELETE_OFFSETS:
            from cdcoperator.offsets import delete_offsets

            pods = await memo.pods.pods(namespace, name)
            if pods:
                raise kopf.TemporaryError(f"waiting for {len(pods)} worker pods to exit before deleting "
                                          "offsets", delay=RETRY_DELAY)
            ok, message = await delete_offsets(body, memo.kube.read_secret)
            _emit(body, "Normal" if ok else "Warning", "OffsetsDeleted" if ok else "OffsetsNotDeleted", message)
        else:
            _emit(body, "Normal", "OffsetsKept", "offsets are kept (spec.deletionPolicy: Retain)")


# The one-shot shardcdc.io/offsets annotation (list/reset/alter) and the metrics' watch-event
# handler register themselves.
from cdcoperator import metrics as _metrics  # noqa: E402, F401
from cdcoperator import offsets as _offsets  # noqa: E402
