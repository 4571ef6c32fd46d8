"""``shardcdc run``: one CdcConnector without Kubernetes, through the operator's own ``reconcile()``.

The loop is the operator's, with two adapters swapped in: :class:`LocalCluster` stands for the
API server, :class:`ProcessKubelet` runs the Deployments' pods as worker processes (the same
worker config files the operator puts in ConfigMaps), and each worker's ``/status`` document is
read exactly as in a cluster (``taskstatus.fetch_status`` on the pod's address). So generations,
drains, reshard journals (exit status 10), ``spec.state`` and the restart annotation behave as
under the operator, because they are the operator's code.

``reconcile()`` runs on a timer (``resync``) and at once whenever a worker's pod changes (started,
ready, exited) or the connector is patched through the control endpoint (``shardcdc scale``).
Stopping the runner stops every worker gracefully (SIGTERM: they flush and commit their offsets);
the next ``shardcdc run`` continues the saved generation.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as _dt
import json
import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp

from cdcoperator import backfillfeed, naming
from cdcoperator.local.cluster import LocalCluster, connector_dir
from cdcoperator.local.control import ControlHandlers, ControlServer
from cdcoperator.local.jobs import ProcessJobs
from cdcoperator.local.kubelet import ProcessKubelet
from cdcoperator.local.prometheus import (
    OPERATOR_FILE,
    WORKERS_FILE,
    OperatorMetricsServer,
    operator_target,
    pod_targets,
    write_targets,
)
from cdcoperator.model import SpecError
from cdcoperator.planner import Plan
from cdcoperator.reconcile import ReconcileContext, reconcile
from cdcoperator.taskstatus import PodSummary, summarize_pod
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = ["LocalRunner", "RunnerThread"]

log = logging.getLogger("cdcoperator.local")

EventSink = Callable[[JsonMapping], None]


class LocalRunner:
    """One connector in local mode. ``body`` is the CdcConnector manifest (as for ``kubectl apply``)."""

    def __init__(
        self,
        body: JsonMapping,
        state_dir: Path,
        *,
        secrets_dir: Path | None = None,
        resync: float = 2.0,
        restart_backoff: float = 10.0,
        worker_env: Mapping[str, str] | None = None,
        on_event: EventSink | None = None,
        control: bool = True,
        metrics_port: int | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.cluster = LocalCluster(self.state_dir, secrets_dir)
        created = self.cluster.put_connector(body)
        self.namespace = str(created["metadata"]["namespace"])
        self.name = str(created["metadata"]["name"])
        self.dir = connector_dir(self.state_dir, self.namespace, self.name)
        self.resync = resync
        self.on_event = on_event
        self.events: collections.deque[JsonObject] = collections.deque(maxlen=1000)
        # --metrics-port: the operator's metrics, and target files for Prometheus (local/prometheus.py).
        self.metrics: OperatorMetricsServer | None = None
        self.targets_dir = self.dir / "prometheus"
        if metrics_port is not None:
            self.metrics = OperatorMetricsServer(metrics_port)
            write_targets(self.targets_dir / OPERATOR_FILE,
                          operator_target(self.namespace, self.name, self.metrics.address))
            write_targets(self.targets_dir / WORKERS_FILE, [])
        self.kubelet = ProcessKubelet(self.cluster.deployments, self.cluster.resolve, self.dir / "pods",
                                      restart_backoff=restart_backoff, extra_env=worker_env,
                                      on_change=self._pods_changed)
        self.jobs = ProcessJobs(self.cluster, self.kubelet, self.dir / "jobs", on_change=self.wake,
                                emit=lambda t, r, m: self._emit({}, t, r, m))
        self.control_enabled = control
        self.control: ControlServer | None = None
        self.reconciles = 0
        self.last_plan: Plan | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    # --- adapters for reconcile() -------------------------------------------------------------------

    def _pods(self, namespace: str, connector: str) -> list[PodSummary]:
        out = []
        for body in self.kubelet.pods():
            meta = body["metadata"]
            if meta["namespace"] == namespace and (meta.get("labels") or {}).get(naming.LABEL_CONNECTOR) == connector:
                summary = summarize_pod(body)
                if summary is not None:
                    out.append(summary)
        return out

    def _emit(self, body: JsonMapping, type_: str, reason: str, message: str) -> None:
        event = {"time": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "type": type_,
                 "reason": reason, "message": message, "object": self.name}
        self.events.append(event)
        try:
            with (self.dir / "events.jsonl").open("a") as fh:
                fh.write(json.dumps(event) + "\n")
        except OSError:
            log.debug("cannot append to the event log", exc_info=True)
        if self.on_event is not None:
            self.on_event(event)

    def _patch(self, patch: JsonMapping) -> JsonMapping:
        body = self.cluster.patch_connector(self.namespace, self.name, patch)
        self.wake()
        return body

    def _patch_status(self, patch: JsonMapping) -> JsonMapping:
        if set(patch) != {"status"} or not isinstance(patch["status"], Mapping):
            raise SpecError('expected {"status": {...}}')
        body = self.cluster.clear_generation_record(self.namespace, self.name, patch["status"])
        self.wake()
        return body

    def _pods_changed(self, bodies: list[JsonObject]) -> None:
        if self.metrics is not None:
            try:
                write_targets(self.targets_dir / WORKERS_FILE, pod_targets(bodies))
            except OSError as exc:  # Prometheus keeps the last file; the workers go on regardless
                log.warning("cannot write the Prometheus target file: %s", exc)
        self.wake()

    # --- the loop ---------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Reconcile now (thread-safe)."""
        loop, event = self._loop, self._wake
        if loop is not None and event is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nothing left to wake
                loop.call_soon_threadsafe(event.set)

    async def run(self, stop: asyncio.Event, started: threading.Event | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self.kubelet.start()
        self.jobs.start()
        try:
            async with aiohttp.ClientSession() as http:
                if self.control_enabled:
                    handlers = ControlHandlers(
                        get=lambda: self.cluster.connector(self.namespace, self.name),
                        patch=self._patch,
                        patch_status=self._patch_status,
                        pods=self.kubelet.pods,
                        events=lambda: list(self.events),
                    )
                    self.control = await ControlServer(self.state_dir, self.namespace, self.name, handlers).start()
                if started is not None:
                    started.set()
                ctx = ReconcileContext(kube=self.cluster, http=http, emit=self._emit, pods=self._pods)
                try:
                    while not stop.is_set():
                        self._wake.clear()
                        try:
                            self.last_plan = await reconcile(ctx, self.namespace, self.name)
                        except Exception:  # keep the connector's processes managed; retry at the next resync
                            log.exception("reconcile of %s/%s failed", self.namespace, self.name)
                        if self.metrics is not None:
                            self.metrics.observe(self.cluster.connector(self.namespace, self.name))
                        self.reconciles += 1
                        self.kubelet.wake()
                        waits = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
                        await asyncio.wait(waits, timeout=self.resync,
                                                        return_when=asyncio.FIRST_COMPLETED)
                        for task in waits:
                            task.cancel()
                finally:
                    if self.control is not None:
                        await self.control.stop()
        finally:
            # Backfill jobs first (a run resumes from the progress topic), then the workers,
            # gracefully: SIGTERM every worker and wait for them to commit their offsets.
            await asyncio.to_thread(self.jobs.close)
            backfillfeed.FEEDS.forget(self.namespace, self.name)
            await asyncio.to_thread(self.kubelet.close)
            if self.metrics is not None:
                self.metrics.close()


class RunnerThread:
    """A :class:`LocalRunner` on its own thread and event loop (the demo, tests)."""

    def __init__(self, runner: LocalRunner) -> None:
        self.runner = runner
        self.error: BaseException | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._main, name=f"shardcdc-run-{runner.name}", daemon=True)

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await self.runner.run(self._stop, self._started)

        try:
            asyncio.run(main())
        except BaseException as exc:
            self.error = exc
            log.exception("local runner failed")
        finally:
            self._started.set()

    def start(self, timeout: float = 30.0) -> RunnerThread:
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("the local runner did not start")
        if self.error is not None:
            raise RuntimeError(f"the local runner failed: {self.error}") from self.error
        return self

    def stop(self, timeout: float = 120.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError("the local runner did not stop")

    def __enter__(self) -> RunnerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
