"""A kubelet (and Deployment controller) for one machine: Deployments' pods as local processes.

Each Deployment with ``replicas >= 1`` gets one pod, run from its pod template exactly as far as a
worker needs: the container's command and args, its env (values, field refs, ConfigMap/Secret key
refs), and its volumes (projected/configMap/secret sources written as files, emptyDir as a
directory) "mounted" by path mapping. There are no mount namespaces, so mount paths are
remapped to the pod's directory in command, args, env values and in the text of ConfigMap files
(the worker's ``worker.properties`` names ``/etc/shardcdc/...`` paths). Every pod shares the
loopback address, so each named container port gets a free host port, which the pod body
reports as its ``containerPort`` and the worker learns through ``port_env`` (its config's
environment override), and the termination message file is ``SHARDCDC_TERMINATION_LOG``.

Semantics follow Kubernetes where the operator can see them: ``strategy: Recreate`` (a template
change or ``replicas: 0`` SIGTERMs the pod; a new one starts only after it has exited; SIGKILL
after ``terminationGracePeriodSeconds``), ``restartPolicy: Always`` with CrashLoopBackOff delays
(``restart_backoff`` doubling up to 5 minutes) and ``lastState.terminated`` keeping the exit status
and termination message, a ``Ready`` flag from the readiness probe. The pod bodies (``pods()``)
have the shape the operator's ``summarize_pod`` reads; local mode uses them directly and the
end-to-end tests write them to a real API server.

Processes start from the kubelet's own thread and are bound to it (``start_bound``): if this
process dies they die too; ``close()`` stops them gracefully first.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cdcoperator.local.children import start_bound
from cdcoperator.local.ports import free_port
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = [
    "BACKOFF_RESET",
    "DEFAULT_COMMANDS",
    "DEFAULT_PORT_ENV",
    "LOCAL_IP",
    "DeploymentSource",
    "PodSpecError",
    "ProcessKubelet",
    "Resolver",
    "decode_secret",
    "restart_delay",
    "template_hash",
]

log = logging.getLogger("cdcoperator.local.kubelet")

LOCAL_IP = "127.0.0.1"
DEPLOYMENT_ANNOTATION = "local.shardcdc.io/deployment"
TEMPLATE_HASH_ANNOTATION = "local.shardcdc.io/template-hash"
# The worker's config reads SHARDCDC_* environment overrides: this is how it learns its host port.
DEFAULT_PORT_ENV: Mapping[str, str] = {"metrics": "SHARDCDC_SHARDCDC_METRICS_PORT"}
# The image's entry point is this interpreter's CLI (same code, same virtualenv).
DEFAULT_COMMANDS: Mapping[str, Sequence[str]] = {"shardcdc": (sys.executable, "-m", "shardcdc_cli.cli")}
TERMINATION_LOG_ENV = "SHARDCDC_TERMINATION_LOG"
# A container does not inherit the host's environment; a local process needs these to find Python.
INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "PYTHONPATH", "VIRTUAL_ENV")
MAX_BACKOFF = 300.0
# As the kubelet: a container that ran this long before it exited was healthy, and its next
# restart waits the first delay again instead of doubling on (kubelet's backOff reset after 10 min).
BACKOFF_RESET = 600.0
MAX_TERMINATION_MESSAGE = 4096

Resolver = Callable[[str, str, str], Mapping[str, bytes] | None]  # (kind, namespace, name) -> data or None
DeploymentSource = Callable[[], Sequence[JsonMapping]]


class PodSpecError(Exception):
    """The pod cannot be started as specified (shown as ``CreateContainerConfigError``)."""


def template_hash(deployment: JsonMapping) -> str:
    template = (deployment.get("spec") or {}).get("template") or {}
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


def decode_secret(secret: JsonMapping) -> dict[str, bytes]:
    """A Secret's ``data`` (base64) and ``stringData`` as bytes."""
    out = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    out.update({k: str(v).encode() for k, v in (secret.get("stringData") or {}).items()})
    return out


def _now_text() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Pod:
    name: str
    namespace: str
    deployment: str
    template: JsonObject
    hash: str
    workdir: Path
    grace: float
    ports: dict[str, int] = field(default_factory=dict)  # port name -> host port
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    crashes: int = 0  # exits in a row, each after less than the back-off reset period of running
    started_at: str | None = None
    started_mono: float = 0.0
    last_exit: JsonObject | None = None  # lastState.terminated
    next_start: float = 0.0
    ready: bool = False
    next_probe: float = 0.0
    terminating: bool = False
    kill_at: float = 0.0
    deletion_timestamp: str | None = None
    config_error: str | None = None
    created: str = field(default_factory=_now_text)

    @property
    def container(self) -> JsonMapping:
        container: JsonMapping = self.template["spec"]["containers"][0]
        return container


def map_mount_paths(text: str, mounts: Sequence[tuple[str, str]]) -> str:
    """``text`` (a ConfigMap file) with each path under a mount path moved to that mount's local
    directory. One pass, longest mount first, paths only where a path can start: a rewritten path
    is never rewritten again (``/etc/app/x`` -> ``/tmp/pods/.../config/x`` must not then match a
    ``/tmp`` mount), and ``/var/tmp/x`` is not under ``/tmp``."""
    local_of = {mount + "/": local + "/" for mount, local in mounts if mount != "/"}
    if not local_of:
        return text
    alternatives = "|".join(re.escape(m) for m in sorted(local_of, key=len, reverse=True))
    return re.sub(rf"(?<![^\s\"'=:,;{{(\[])(?:{alternatives})", lambda m: local_of[m.group(0)], text)


def restart_delay(crashes: int, ran_for: float, first: float, reset_after: float = BACKOFF_RESET) -> tuple[int, float]:
    """(exits in a row, delay before the next start) after a container ran ``ran_for`` seconds:
    ``first`` doubling per exit in a row up to ``MAX_BACKOFF``; a run of ``reset_after`` seconds
    or more starts the count again, as the kubelet resets its back-off after a healthy run."""
    crashes = 1 if ran_for >= reset_after else crashes + 1
    return crashes, min(first * 2 ** (crashes - 1), MAX_BACKOFF)


class ProcessKubelet:
    """Keeps one local process per Deployment replica; ``pods()`` reports them as pod bodies.

    ``source`` lists the Deployments to run (called from the kubelet's thread every ``period``);
    ``resolver`` returns the data of a ConfigMap or Secret; ``on_change`` is called (from the
    kubelet's thread) with the pod bodies whenever they changed.
    """

    def __init__(
        self,
        source: DeploymentSource,
        resolver: Resolver,
        workdir: Path,
        *,
        period: float = 0.25,
        restart_backoff: float = 10.0,
        backoff_reset: float = BACKOFF_RESET,
        port_env: Mapping[str, str] = DEFAULT_PORT_ENV,
        commands: Mapping[str, Sequence[str]] = DEFAULT_COMMANDS,
        extra_env: Mapping[str, str] | None = None,
        on_change: Callable[[list[JsonObject]], None] | None = None,
    ) -> None:
        self.source = source
        self.resolver = resolver
        self.workdir = Path(workdir)
        self.period = period
        self.restart_backoff = restart_backoff
        self.backoff_reset = backoff_reset
        self.port_env = dict(port_env)
        self.commands = {k: tuple(v) for k, v in commands.items()}
        self.extra_env = dict(extra_env or {})
        self.on_change = on_change
        self.errors: list[str] = []
        self._pods: list[_Pod] = []
        self._counter: dict[str, int] = {}
        self._bodies: list[JsonObject] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="process-kubelet", daemon=True)
        self.close_grace: float | None = None

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> ProcessKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __enter__(self) -> ProcessKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wake(self) -> None:
        """Sync now instead of at the next period (e.g. right after the Deployments changed)."""
        self._wake.set()

    def close(self, grace: float | None = None) -> None:
        """Stop every pod (SIGTERM, SIGKILL after the grace period) and the kubelet's thread."""
        self.close_grace = grace
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def pods(self) -> list[JsonObject]:
        with self._lock:
            copy: list[JsonObject] = json.loads(json.dumps(self._bodies))  # a deep copy, safe from the kubelet's thread
            return copy

    # --- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    self.sync(self.source())
                except Exception as exc:  # keep running; the owner sees the errors
                    log.exception("kubelet sync failed")
                    self.errors.append(repr(exc))
                self._wake.wait(self.period)
                self._wake.clear()
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        for pod in self._pods:
            if not pod.terminating:
                self._terminate(pod, self.close_grace)
        deadline = max((p.kill_at for p in self._pods), default=0.0)
        while any(p.proc is not None for p in self._pods):
            for pod in self._pods:
                self._reap(pod)
                if pod.proc is not None and time.monotonic() >= pod.kill_at:
                    self._signal(pod, signal.SIGKILL)
            if time.monotonic() > deadline + 10:
                break
            time.sleep(0.05)  # waiting for children to exit at shutdown; nothing else to do
        for pod in self._pods:
            self._cleanup(pod)
        self._pods = []
        self._publish()

    def sync(self, deployments: Sequence[JsonMapping]) -> None:
        """One pass: bring the processes to what the Deployments say."""
        now = time.monotonic()
        desired: dict[tuple[str, str], tuple[JsonMapping, int, str]] = {}
        for dep in deployments:
            meta = dep.get("metadata") or {}
            key = (str(meta.get("namespace") or "default"), str(meta["name"]))
            replicas = int((dep.get("spec") or {}).get("replicas", 1) or 0)
            desired[key] = (dep, replicas, template_hash(dep))
        for pod in self._pods:
            self._reap(pod)
        for pod in self._pods:
            want = desired.get((pod.namespace, pod.deployment))
            if not pod.terminating and (want is None or want[1] == 0 or want[2] != pod.hash):
                self._terminate(pod)
        for pod in list(self._pods):
            if pod.terminating:
                if pod.proc is None:
                    self._cleanup(pod)
                    self._pods.remove(pod)
                elif now >= pod.kill_at:
                    self._signal(pod, signal.SIGKILL)
        for (namespace, name), (dep, replicas, digest) in desired.items():
            if replicas < 1:
                continue
            mine = [p for p in self._pods if (p.namespace, p.deployment) == (namespace, name)]
            if any(p.terminating for p in mine):
                continue  # Recreate: the old pod must be gone first
            pod = mine[0] if mine else self._new_pod(namespace, name, dep, digest)
            if pod.proc is None and now >= pod.next_start:
                self._launch(pod)
        self._probe(now)
        self._publish()

    # --- pods -----------------------------------------------------------------------------------

    def _new_pod(self, namespace: str, deployment: str, dep: JsonMapping, digest: str) -> _Pod:
        n = self._counter.get(f"{namespace}/{deployment}", 0)
        self._counter[f"{namespace}/{deployment}"] = n + 1
        name = f"{deployment}-{n}"
        template = json.loads(json.dumps((dep.get("spec") or {}).get("template") or {}))
        spec = template.get("spec") or {}
        grace = float(spec.get("terminationGracePeriodSeconds", 30))
        pod = _Pod(name, namespace, deployment, template, digest, self.workdir / namespace / name, grace)
        for container in (spec.get("containers") or [])[:1]:
            for port in container.get("ports") or ():
                pod.ports[str(port.get("name") or port["containerPort"])] = free_port()
        self._pods.append(pod)
        return pod

    def _launch(self, pod: _Pod) -> None:
        if pod.starts:
            # Host ports stand in for a pod's own network namespace: another process may have taken
            # one since it was picked (a crash loop on "address in use", probes answered by that
            # process), so every restart gets fresh ones; the pod body reports them.
            for port_name in pod.ports:
                pod.ports[port_name] = free_port()
        try:
            argv, env, cwd = self.prepare(pod)
        except (PodSpecError, LookupError, OSError) as exc:
            pod.config_error = str(exc)
            pod.next_start = time.monotonic() + min(self.restart_backoff, 2.0)
            return
        pod.config_error = None
        term = pod.workdir / "termination-log"
        with contextlib.suppress(FileNotFoundError):
            term.unlink()
        with (pod.workdir / "container.log").open("ab") as out:
            pod.proc = start_bound(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                   env=env, cwd=cwd)
        pod.starts += 1
        pod.started_at = _now_text()
        pod.started_mono = time.monotonic()
        pod.ready = False
        pod.next_probe = time.monotonic() + 0.2
        log.info("started pod %s/%s (pid %d)", pod.namespace, pod.name, pod.proc.pid)

    def _reap(self, pod: _Pod) -> None:
        proc = pod.proc
        if proc is None or proc.poll() is None:
            return
        code = int(proc.returncode)
        message = ""
        with contextlib.suppress(OSError):
            message = (pod.workdir / "termination-log").read_text(errors="replace")[-MAX_TERMINATION_MESSAGE:]
        if code < 0:  # killed by a signal: the kubelet reports 128 + signal number
            code = 128 - code
        pod.last_exit = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message,
                         "startedAt": pod.started_at or _now_text(), "finishedAt": _now_text()}
        pod.proc = None
        pod.ready = False
        if not pod.terminating:
            pod.crashes, delay = restart_delay(pod.crashes, time.monotonic() - pod.started_mono,
                                               self.restart_backoff, self.backoff_reset)
            pod.next_start = time.monotonic() + delay
            log.info("pod %s/%s exited with %d; restarting in %.0fs", pod.namespace, pod.name, code, delay)

    def _terminate(self, pod: _Pod, grace: float | None = None) -> None:
        pod.terminating = True
        pod.deletion_timestamp = _now_text()
        pod.ready = False
        pod.kill_at = time.monotonic() + (pod.grace if grace is None else grace)
        self._signal(pod, signal.SIGTERM)

    def _signal(self, pod: _Pod, sig: int) -> None:
        if pod.proc is None or pod.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pod.proc.pid, sig)

    def _cleanup(self, pod: _Pod) -> None:
        # Logs stay for the user; the volumes may hold Secret files.
        shutil.rmtree(pod.workdir / "volumes", ignore_errors=True)

    def _probe(self, now: float) -> None:
        for pod in self._pods:
            if pod.proc is None or pod.terminating or now < pod.next_probe:
                continue
            probe = (pod.container.get("readinessProbe") or {}).get("httpGet")
            period = float((pod.container.get("readinessProbe") or {}).get("periodSeconds", 1))
            pod.next_probe = now + min(period, 1.0)
            if not probe:
                pod.ready = True
                continue
            port = probe.get("port")
            host_port = pod.ports.get(str(port)) if not isinstance(port, int) else self._host_port(pod, port)
            if host_port is None:
                pod.ready = False
                continue
            try:
                with urllib.request.urlopen(f"http://{LOCAL_IP}:{host_port}{probe.get('path', '/')}",
                                            timeout=0.5) as resp:
                    pod.ready = 200 <= resp.status < 400
            except (OSError, urllib.error.URLError):
                pod.ready = False

    def _host_port(self, pod: _Pod, container_port: int) -> int | None:
        for port in pod.container.get("ports") or ():
            if int(port["containerPort"]) == container_port:
                return pod.ports.get(str(port.get("name") or container_port))
        return None

    # --- from the pod spec to a process -----------------------------------------------------------

    def prepare(self, pod: _Pod) -> tuple[list[str], dict[str, str], str]:
        spec = pod.template.get("spec") or {}
        if len(spec.get("containers") or ()) != 1:
            raise PodSpecError(f"exactly one container is supported, the template has "
                               f"{len(spec.get('containers') or ())}")
        container = pod.container
        pod.workdir.mkdir(parents=True, exist_ok=True)
        mounts = self._volumes(pod, spec, container)

        def mapped(value: str) -> str:
            for mount, local in mounts:
                if value == mount or value.startswith(mount + "/"):
                    return local + value[len(mount):]
            return value

        argv = [mapped(str(a)) for a in [*(container.get("command") or ()), *(container.get("args") or ())]]
        if not argv:
            raise PodSpecError("the container has no command (image entry points are not known locally)")
        if argv[0] in self.commands:
            argv = [*self.commands[argv[0]], *argv[1:]]
        env = {k: os.environ[k] for k in INHERITED_ENV if k in os.environ}
        env.update(self.extra_env)
        fields = {"metadata.name": pod.name, "metadata.namespace": pod.namespace, "status.podIP": LOCAL_IP,
                  "spec.nodeName": "local", "spec.serviceAccountName": str(spec.get("serviceAccountName") or "")}
        for var in container.get("env") or ():
            name = str(var["name"])
            if "value" in var:
                env[name] = mapped(str(var["value"]))
                continue
            source = var.get("valueFrom") or {}
            if "fieldRef" in source:
                path = source["fieldRef"]["fieldPath"]
                if path not in fields:
                    raise PodSpecError(f"env {name}: fieldRef {path} is not supported locally")
                env[name] = fields[path]
            elif "secretKeyRef" in source or "configMapKeyRef" in source:
                kind, ref = ("Secret", source["secretKeyRef"]) if "secretKeyRef" in source else (
                    "ConfigMap", source["configMapKeyRef"])
                data = self.resolver(kind, pod.namespace, ref["name"])
                if data is None or ref["key"] not in data:
                    if ref.get("optional"):
                        continue
                    raise PodSpecError(f"env {name}: {kind} {ref['name']} key {ref['key']} not found")
                env[name] = data[ref["key"]].decode()
            else:
                raise PodSpecError(f"env {name}: unsupported valueFrom {sorted(source)}")
        for port_name, host_port in pod.ports.items():
            if port_name in self.port_env:
                env[self.port_env[port_name]] = str(host_port)
        env[TERMINATION_LOG_ENV] = str(pod.workdir / "termination-log")
        cwd = mapped(str(container.get("workingDir") or "")) or str(pod.workdir)
        return argv, env, cwd

    def _volumes(self, pod: _Pod, spec: JsonMapping, container: JsonMapping) -> list[tuple[str, str]]:
        """Write the pod's volumes under its directory; (mount path, local path), longest mount first."""
        root = pod.workdir / "volumes"
        shutil.rmtree(root, ignore_errors=True)  # fresh per start, as ConfigMap contents may have changed
        text_files: list[Path] = []
        dirs: dict[str, Path] = {}
        for volume in spec.get("volumes") or ():
            name = str(volume["name"])
            target = root / name
            target.mkdir(parents=True)
            dirs[name] = target
            if "emptyDir" in volume:
                continue
            if "projected" in volume:
                mode = int(volume["projected"].get("defaultMode", 0o644))
                sources = volume["projected"].get("sources") or ()
            elif "configMap" in volume:
                mode = int(volume["configMap"].get("defaultMode", 0o644))
                sources = [{"configMap": volume["configMap"]}]
            elif "secret" in volume:
                mode = int(volume["secret"].get("defaultMode", 0o644))
                sources = [{"secret": {**volume["secret"], "name": volume["secret"]["secretName"]}}]
            else:
                raise PodSpecError(f"volume {name}: only projected, configMap, secret and emptyDir run locally")
            for src in sources:
                kind = "ConfigMap" if "configMap" in src else "Secret" if "secret" in src else None
                if kind is None:
                    raise PodSpecError(f"volume {name}: unsupported projected source {sorted(src)}")
                ref = src["configMap" if kind == "ConfigMap" else "secret"]
                data = self.resolver(kind, pod.namespace, ref["name"])
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise PodSpecError(f"volume {name}: {kind} {ref['name']} not found")
                items = ref.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    if item["key"] not in data:
                        raise PodSpecError(f"volume {name}: {kind} {ref['name']} has no key {item['key']}")
                    path = (target / item["path"]).resolve()
                    if not path.is_relative_to(target.resolve()):
                        raise PodSpecError(f"volume {name}: item path {item['path']} leaves the volume")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(data[item["key"]])
                    path.chmod(int(item.get("mode", mode)) | 0o400)
                    if kind == "ConfigMap":
                        text_files.append(path)
        mounts: list[tuple[str, str]] = []
        for mount in container.get("volumeMounts") or ():
            local_dir = dirs.get(str(mount["name"]))
            if local_dir is None:
                raise PodSpecError(f"volumeMount {mount['name']}: no such volume")
            if mount.get("subPath"):
                local_dir = local_dir / str(mount["subPath"])
            mounts.append((str(mount["mountPath"]).rstrip("/") or "/", str(local_dir)))
        mounts.sort(key=lambda m: len(m[0]), reverse=True)
        for path in text_files:
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            new = map_mount_paths(text, mounts)
            if new != text:
                mode = path.stat().st_mode
                path.chmod(mode | 0o200)
                path.write_text(new)
                path.chmod(mode)
        return mounts

    # --- pod bodies -----------------------------------------------------------------------------

    def _publish(self) -> None:
        bodies = [self._body(p) for p in self._pods]
        with self._lock:
            changed = bodies != self._bodies
            self._bodies = bodies
        if changed and self.on_change is not None:
            self.on_change(json.loads(json.dumps(bodies)))

    def _body(self, pod: _Pod) -> JsonObject:
        meta_t = pod.template.get("metadata") or {}
        container = pod.template["spec"]["containers"][0] if pod.template["spec"].get("containers") else {}
        cs: JsonObject = {
            "name": str(container.get("name") or "worker"),
            "image": str(container.get("image") or ""),
            "imageID": "",
            "restartCount": max(pod.starts - 1, 0),
            "ready": pod.ready,
            "started": pod.proc is not None,
        }
        if pod.proc is not None:
            cs["state"] = {"running": {"startedAt": pod.started_at}}
        elif pod.config_error:
            cs["state"] = {"waiting": {"reason": "CreateContainerConfigError", "message": pod.config_error}}
        elif pod.last_exit is not None and not pod.terminating:
            cs["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                                       "message": f"back-off restarting container (exit status "
                                                  f"{pod.last_exit['exitCode']})"}}
        elif pod.last_exit is not None:
            cs["state"] = {"terminated": dict(pod.last_exit)}
        else:
            cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
        if pod.last_exit is not None and "terminated" not in cs["state"]:
            cs["lastState"] = {"terminated": dict(pod.last_exit)}
        metadata: JsonObject = {
            "name": pod.name,
            "namespace": pod.namespace,
            "labels": dict(meta_t.get("labels") or {}),
            "annotations": {**(meta_t.get("annotations") or {}), DEPLOYMENT_ANNOTATION: pod.deployment,
                            TEMPLATE_HASH_ANNOTATION: pod.hash},
            "creationTimestamp": pod.created,
        }
        if pod.deletion_timestamp:
            metadata["deletionTimestamp"] = pod.deletion_timestamp
        ports = [{"name": name, "containerPort": port, "protocol": "TCP"} for name, port in pod.ports.items()]
        started = pod.starts > 0
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {"containers": [{"name": cs["name"], "image": cs["image"] or "local", "ports": ports}],
                     "restartPolicy": "Always", "nodeName": "local"},
            "status": {
                "phase": "Running" if started else "Pending",
                **({"podIP": LOCAL_IP, "podIPs": [{"ip": LOCAL_IP}]} if started else {}),
                "conditions": [{"type": "Ready", "status": "True" if pod.ready else "False"}],
                "containerStatuses": [cs],
            },
        }
