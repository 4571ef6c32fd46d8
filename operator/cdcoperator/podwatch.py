"""Worker pods, watched directly: one list + watch per namespace that holds connectors.

kopf's own pod index and event handler put every pod event through its handler machinery (the
object's memory, a deep copy for the diff base, loggers, causes, handler invocation, a patch
step): at 1,024 shards that was 37 % of the operator's CPU during a scale (issue 30's profile),
for what is a dict update and one check. Here a thread per namespace reads the watch stream,
summarises each pod (``taskstatus.summarize_pod``), and hands the summaries to the event loop in
batches; the loop keeps :class:`PodIndex` and calls ``on_transition`` when an event completes a
step the planner waits on (``reconcile.completes_transition``). kopf keeps the CdcConnector.

A namespace's watch starts with the first reconcile of a connector there (the operator serves the
namespaces kopf was told to, and pods are read where connectors live; the RBAC is the same list and
watch on pods); :meth:`PodWatch.pods` waits for its first list, so a reconcile never plans from an
empty index. After a re-list (the watch expired: 410 Gone, or the connection broke) every connector
whose pods changed is kicked as well: a transition may have happened in the gap.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from cdcoperator import naming
from cdcoperator.reconcile import completes_transition
from cdcoperator.taskstatus import PodSummary, summarize_pod
from cdcworker.jsontypes import JsonMapping

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = ["PodIndex", "PodWatch", "WatchExpired", "open_collection", "watch_events"]

log = logging.getLogger("cdcoperator.podwatch")

# The server ends each watch after this long (kopf's setting for its own watches: streams can go
# silent without an error), and the client gives up if nothing at all arrives for longer.
WATCH_SECONDS = 270
READ_TIMEOUT = 300.0
CONNECT_TIMEOUT = 10.0
RETRY_SECONDS = 1.0

# (event type, connector, pod summary) as the watch thread hands them over; type None: a re-list
# begins (its pods follow as ADDED, then a "SYNCED" marker ends it).
PodEvent = tuple[str | None, str, PodSummary | None]
Transition = Callable[[str, str], None]  # (namespace, connector)


class PodIndex:
    """One namespace's worker pods by connector (pure: no I/O)."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, PodSummary]] = {}
        # connector -> (generation, pods it runs), as the connector's last plan said (``expect``).
        self._expected: dict[str, tuple[int, int]] = {}

    def pods(self, connector: str) -> list[PodSummary]:
        return list(self._pods.get(connector, {}).values())

    def connectors(self) -> set[str]:
        return set(self._pods)

    def snapshot(self) -> dict[str, dict[str, PodSummary]]:
        return {c: dict(p) for c, p in self._pods.items()}

    def clear(self) -> None:
        self._pods.clear()

    def expect(self, connector: str, generation: int, running: int) -> None:
        """The connector's plan runs ``running`` workers of ``generation``: until that many of its
        pods are up, a pod coming up does not complete the generation's start."""
        self._expected[connector] = (generation, running)

    def update(self, connector: str, pod: PodSummary, deleted: bool) -> bool:
        """Record a pod's event; True when it completes a transition of its connector."""
        mine = self._pods.setdefault(connector, {})
        if not deleted and mine.get(pod.name) == pod:
            return False  # nothing the operator reads changed (another field of the pod did)
        gen, running = self._expected.get(connector, (None, None))
        done = completes_transition(mine.values(), pod, deleted, running if gen == pod.generation else None)
        if deleted:
            mine.pop(pod.name, None)
            if not mine:
                del self._pods[connector]
        else:
            mine[pod.name] = pod
        return done


class WatchExpired(Exception):
    """The watch's resource version is too old (410 Gone): list again."""


class _NamespaceWatch:
    """The list + watch of one namespace's worker pods, read in a thread of its own."""

    def __init__(self, api: ApiClient, namespace: str, loop: asyncio.AbstractEventLoop,
                 on_transition: Transition) -> None:
        self.api, self.namespace, self.loop, self.on_transition = api, namespace, loop, on_transition
        self.index = PodIndex()
        self.listed = asyncio.Event()
        self._queue: collections.deque[PodEvent] = collections.deque()
        self._scheduled = False
        self._before_relist: dict[str, dict[str, PodSummary]] | None = None
        self._listing = True  # until the first list is in
        # The context of the reconcile that started the watch: kopf's posting of events (kopf.event)
        # reads its queue from context variables, which the kicked reconciles need as well.
        self._context = contextvars.copy_context()
        self._stop = threading.Event()
        self._resp: Any = None  # Any: urllib3's response in flight, shut down to stop the thread
        self._thread = threading.Thread(target=self._run, name=f"pod-watch-{namespace}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        resp = self._resp
        if resp is not None:  # wake the thread's read (urllib3's shutdown is for this; close() would not)
            with contextlib.suppress(ValueError, OSError):
                resp.shutdown()

    # --- the thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                self._watch(version)
            except WatchExpired:
                continue  # the usual end of a long watch: list again at once
            except Exception as exc:  # any failure: list again after a pause, as kopf does
                if self._stop.is_set():
                    return
                log.warning("watching pods in %s: %s; listing again in %.0f s", self.namespace, exc, RETRY_SECONDS)
                self._stop.wait(RETRY_SECONDS)

    def _request(self, query: dict[str, str]) -> Any:  # Any: the client's response (urllib3's in .response)
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        return open_collection(self.api, path, {"labelSelector": naming.LABEL_CONNECTOR, **query})

    def _list(self) -> str:
        resp = self._request({})
        doc = orjson.loads(resp.read())
        self._put(None, "", None)
        for item in doc.get("items") or ():
            self._event("ADDED", item)
        self._put("SYNCED", "", None)
        return str((doc.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> None:
        query = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(WATCH_SECONDS)}
        while not self._stop.is_set():
            query["resourceVersion"] = version
            self._resp = self._request(query).response
            try:
                for kind, obj in watch_events(self._resp):
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if kind != "BOOKMARK":
                        self._event(kind, obj)
            finally:
                self._resp.release_conn()
                self._resp = None

    def _event(self, kind: str, body: JsonMapping) -> None:
        summary = summarize_pod(body)
        connector = ((body.get("metadata") or {}).get("labels") or {}).get(naming.LABEL_CONNECTOR)
        if summary is not None and connector:
            self._put(kind, str(connector), summary)

    def _put(self, kind: str | None, connector: str, pod: PodSummary | None) -> None:
        # One hand-over to the loop per batch, not per event: each call_soon_threadsafe wakes the loop.
        self._queue.append((kind, connector, pod))
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon_threadsafe(self._drain, context=self._context)

    # --- the event loop -------------------------------------------------------------------------------

    def _drain(self) -> None:
        self._scheduled = False  # before popping: an event queued from here on schedules another drain
        kicked: set[str] = set()
        while self._queue:
            kind, connector, pod = self._queue.popleft()
            if kind is None:  # a list begins: its pods replace the index (a re-list is compared after)
                self._before_relist = self.index.snapshot() if self.listed.is_set() else None
                self._listing = True
                self.index.clear()
            elif kind == "SYNCED":
                self._listing = False
                kicked |= self._relisted()
            elif pod is not None and self.index.update(connector, pod, kind == "DELETED") and not self._listing:
                kicked.add(connector)
        for connector in sorted(kicked):
            self.on_transition(self.namespace, connector)

    def _relisted(self) -> set[str]:
        """Connectors whose pods a re-list found changed (none on the first list)."""
        before, self._before_relist = self._before_relist, None
        self.listed.set()
        if before is None:
            return set()
        after = self.index.snapshot()
        return {c for c in set(before) | set(after) if before.get(c) != after.get(c)}


def open_collection(api: ApiClient, path: str, query: Mapping[str, str]) -> Any:  # Any: the client's response
    """GET a collection (a list, or a watch with ``watch=1``), its body not read yet."""
    method, url, headers, body, post = api.param_serialize(
        "GET", f"{path}?{urllib.parse.urlencode(query)}", header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"])
    resp = api.call_api(method, url, headers, body, post, _request_timeout=(CONNECT_TIMEOUT, READ_TIMEOUT))
    status = getattr(resp, "status", 0)
    if status != 200:
        raise RuntimeError(f"GET {path}: HTTP {status}: {resp.read()[:300]!r}")
    return resp


def watch_events(resp: Any) -> Iterator[tuple[str, JsonMapping]]:  # Any: urllib3's streaming response
    """A watch stream's (type, object) events, bookmarks included. An ERROR event raises:
    ``WatchExpired`` for 410 Gone (the version is too old: list again), else RuntimeError."""
    for line in _lines(resp):
        event = orjson.loads(line)  # every pod event of the namespace: orjson, not json (issue 30)
        obj = event.get("object") or {}
        kind = str(event.get("type"))
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired()
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        yield kind, obj


def _lines(resp: Any) -> Iterator[bytes]:  # Any: urllib3's streaming response
    """The watch stream's lines (one JSON event each)."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


class PodWatch:
    """The worker pods of every namespace that has connectors (see the module's docstring)."""

    def __init__(self, api_factory: Callable[[], ApiClient], on_transition: Transition) -> None:
        self._api_factory, self._on_transition = api_factory, on_transition
        self._api: ApiClient | None = None
        self._watches: dict[str, _NamespaceWatch] = {}

    async def pods(self, namespace: str, connector: str) -> list[PodSummary]:
        """The connector's worker pods, once the namespace's pods have been listed."""
        watch = self._watches.get(namespace)
        if watch is None:
            if self._api is None:
                self._api = self._api_factory()
            watch = self._watches[namespace] = _NamespaceWatch(
                self._api, namespace, asyncio.get_running_loop(), self._on_transition)
            watch.start()
        await watch.listed.wait()
        return watch.index.pods(connector)

    def expect(self, namespace: str, connector: str, generation: int, running: int) -> None:
        """What the connector's last plan runs (``PodIndex.expect``); before the namespace's first list: nothing."""
        watch = self._watches.get(namespace)
        if watch is not None:
            watch.index.expect(connector, generation, running)

    def indexed(self, namespace: str, connector: str) -> list[PodSummary]:
        """What the index holds now (after :meth:`pods` has been awaited for the namespace)."""
        watch = self._watches.get(namespace)
        return watch.index.pods(connector) if watch is not None else []

    def close(self) -> None:
        for watch in self._watches.values():
            watch.stop()
        self._watches.clear()
        if self._api is not None:
            self._api.close()
            self._api = None
