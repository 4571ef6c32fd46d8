"""Local mode's Job controller: the backfill Jobs ``reconcile()`` creates, run as child processes.

With the ``local`` engine, ``reconcile_backfills`` creates (in local mode only) a ConfigMap with
the connector's configuration and a ``batch/v1`` Job whose one container runs ``shardcdc
backfill --engine local``. :class:`ProcessJobs` does what the Job controller and the kubelet do
for it: start the pod template as a process (the kubelet's own preparation: command mapping,
volumes as files, paths remapped), set the Job's status (``active``, ``startTime``, then the
``Complete`` or ``Failed`` condition), retry a failed attempt up to ``backoffLimit`` (the run
resumes from the progress topic), and SIGTERM the process when the Job is deleted (a cancelled
backfill). While a process runs, a Pod object with the template's labels stands for it in the
cluster, as on Kubernetes: the operator releases the workers from a cancelled run only once no
pod of the run is left (``backfillrelease``). Processes are bound to this one (``start_bound``)
and stopped by :meth:`close`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from cdcoperator.apply import Kind
from cdcoperator.backfillrelease import PODS
from cdcoperator.local.children import start_bound
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.local.kubelet import ProcessKubelet, _Pod
from cdcworker.jsontypes import JsonMapping

__all__ = ["JOBS", "ProcessJobs"]

log = logging.getLogger("cdcoperator.local.jobs")

JOBS = Kind("/apis/batch/v1", "jobs")
KILL_GRACE = 10.0

Emit = Callable[[str, str, str], None]  # (type, reason, message)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Run:
    namespace: str
    name: str
    proc: subprocess.Popen[bytes] | None = None
    attempts: int = 0
    failed: int = 0
    started: str = ""
    done: bool = False
    kill_at: float = 0.0
    log: Path | None = None
    pod: str = ""  # the Pod object standing for the running process

    @property
    def pod_name(self) -> str:
        return f"{self.name}-{self.attempts}"


class ProcessJobs:
    def __init__(self, cluster: LocalCluster, kubelet: ProcessKubelet, workdir: Path, *, period: float = 0.5,
                 emit: Emit | None = None, on_change: Callable[[], None] | None = None) -> None:
        self.cluster = cluster
        self.kubelet = kubelet  # for its pod preparation (commands, env, volumes)
        self.workdir = Path(workdir)
        self.period = period
        self.emit = emit
        self.on_change = on_change
        self.runs: dict[tuple[str, str], _Run] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-jobs", daemon=True)

    def start(self) -> ProcessJobs:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.sync()
                except Exception:  # keep running; the next pass retries
                    log.exception("job sync failed")
                self._stop.wait(self.period)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        for run in self.runs.values():
            self._terminate(run)
        deadline = time.monotonic() + KILL_GRACE
        for run in self.runs.values():
            if run.proc is None:
                continue
            try:
                run.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.proc.pid, signal.SIGKILL)
                run.proc.wait()
            self._exited(run)

    def _exited(self, run: _Run) -> None:
        """The process is gone: so is its Pod object."""
        if run.pod:
            self.cluster.remove(PODS, run.namespace, run.pod)
            run.pod = ""

    def _terminate(self, run: _Run) -> None:
        if run.proc is not None and run.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.proc.pid, signal.SIGTERM)
            run.kill_at = time.monotonic() + KILL_GRACE

    def _say(self, type_: str, reason: str, message: str) -> None:
        if self.emit is not None:
            self.emit(type_, reason, message)

    def sync(self) -> None:
        jobs = {(j["metadata"]["namespace"], j["metadata"]["name"]): j for j in self.cluster.children(JOBS)}
        changed = False
        for key, run in list(self.runs.items()):
            if key in jobs:
                continue
            # Deleted (cancelled): stop the process, forget the run once it has exited.
            if run.proc is not None and run.proc.poll() is None:
                if run.kill_at == 0.0:
                    self._terminate(run)
                    self._say("Normal", "BackfillCancelled", f"job {run.name}: stopped (the Job was deleted)")
                elif time.monotonic() > run.kill_at:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(run.proc.pid, signal.SIGKILL)
                continue
            self._exited(run)
            del self.runs[key]
        for key, job in jobs.items():
            run = self.runs.setdefault(key, _Run(*key))
            if run.done or self._finished(job):
                run.done = True
                continue
            if run.proc is not None:
                code = run.proc.poll()
                if code is None:
                    continue
                run.proc = None
                self._exited(run)
                if code == 0:
                    run.done = True
                    self.cluster.set_status(JOBS, *key, {"active": 0, "succeeded": 1, "completionTime": _now(),
                                                         "conditions": [{"type": "Complete", "status": "True",
                                                                         "lastTransitionTime": _now()}]})
                    self._say("Normal", "BackfillCompleted", f"job {run.name} completed")
                    changed = True
                    continue
                run.failed += 1
                limit = int((job.get("spec") or {}).get("backoffLimit", 6))
                if run.failed > limit:
                    run.done = True
                    message = f"attempt {run.attempts} exited with {code}: {self._tail(run)}"
                    self.cluster.set_status(JOBS, *key, {"active": 0, "failed": run.failed, "conditions": [
                        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": message,
                         "lastTransitionTime": _now()}]})
                    self._say("Warning", "BackfillFailed", f"job {run.name}: {message}")
                    changed = True
                    continue
                self.cluster.set_status(JOBS, *key, {"failed": run.failed})
            self._launch(run, job)
            changed = True
        if changed and self.on_change is not None:
            self.on_change()

    @staticmethod
    def _finished(job: JsonMapping) -> bool:
        return any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                   for c in (job.get("status") or {}).get("conditions") or ())

    def _tail(self, run: _Run) -> str:
        try:
            lines = (run.log.read_text(errors="replace") if run.log else "").strip().splitlines()
        except OSError:
            return ""
        return lines[-1][-500:] if lines else ""

    def _launch(self, run: _Run, job: JsonMapping) -> None:
        template = (job.get("spec") or {}).get("template") or {}
        run.attempts += 1
        workdir = self.workdir / run.namespace / f"{run.name}-{run.attempts}"
        pod = _Pod(run.pod_name, run.namespace, run.name, template, "", workdir, KILL_GRACE)
        try:
            argv, env, cwd = self.kubelet.prepare(pod)
        except Exception as exc:  # the spec cannot run here: the Job fails with the reason
            run.done = True
            self.cluster.set_status(JOBS, run.namespace, run.name, {"conditions": [
                {"type": "Failed", "status": "True", "reason": "CreateContainerConfigError", "message": str(exc)}]})
            self._say("Warning", "BackfillFailed", f"job {run.name}: {exc}")
            return
        run.log = workdir / "container.log"
        with run.log.open("ab") as out:
            run.proc = start_bound(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=cwd)
        run.started = run.started or _now()
        run.kill_at = 0.0
        run.pod = run.pod_name
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        self.cluster.put(PODS, {"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Running"},
                                "metadata": {"name": run.pod, "namespace": run.namespace, "labels": labels}})
        self.cluster.set_status(JOBS, run.namespace, run.name, {"active": 1, "startTime": run.started})
        self._say("Normal", "BackfillStarted", f"job {run.name}: attempt {run.attempts} (pid {run.proc.pid}), "
                                                f"log {run.log}")
