"""Launching backfills (pure): which runs a CdcConnector wants, the Spark objects that run them,
and how their Spark state maps to ``status.backfills[]`` and the ``BackfillRunning`` condition.

Engines (``spec.snapshot.backfill.engine``):

``sparkOperator``
    a ``SparkApplication`` (``sparkoperator.k8s.io/v1beta2``, Kubeflow spark-operator) owned by
    the CdcConnector; the spark-operator submits it and reports ``status.applicationState``.
``sparkSubmit``
    a ``Job`` owned by the CdcConnector that runs ``spark-submit --master k8s://...`` in cluster
    mode (``waitAppCompletion``: the Job ends with the application); the driver and executor pod
    templates carry our labels and the connector's ownerReference.
``local``
    ``shardcdc backfill`` (threads, no Spark): in local mode a Job that ``shardcdc run`` runs as a
    child process (``local.jobs``); on Kubernetes nothing is created (run it next to the workers).

Runs come from ``spec.backfills``, the initial snapshot, and ``execute-snapshot`` signals the
workers hand over through the progress topic (``backfillfeed``). Names are deterministic
(``<connector>-bf-<id>``), so a resubmission is idempotent (create once, 409 means it exists), and
the run id given to the job is stable too: a Spark retry or a recreated application resumes from
the progress topic instead of starting over. Deleting a request from ``spec.backfills`` (or a
``stop-snapshot`` signal, for a signal's run) cancels it: its objects are deleted.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from cdcoperator import backfillfeed, backfillrelease, naming
from cdcoperator.apply import CONFIG_MAPS, ApiError, ClusterApi, Kind
from cdcoperator.conditions import BACKFILL_RUNNING, ConditionSpec
from cdcoperator.kafkaaccess import KafkaAccess
from cdcoperator.model import BackfillEngine, BackfillRequest, ConnectorResource, State
from cdcoperator.objects import (
    CONFIG_DIR,
    CONFIG_FILE,
    CONFIG_KEY,
    INITIAL_BACKFILL,
    WORKER_UID,
    _projected_sources,
    owner_reference,
    render_properties,
    shared_properties,
)
from cdcoperator.objects import backfill_run_id as run_id
from cdcworker.backfill import SPARK_VERSION
from cdcworker.backfill.progress import SignalClosed
from cdcworker.jsontypes import JsonMapping, JsonObject

SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"
SPARK_KIND = "SparkApplication"
# The Spark image ships the job's entry point here (see docs/backfill.md, "Image").
SPARK_MAIN = "local:///opt/shardcdc/spark_main.py"
# Set after the user's sparkConf: a speculative second attempt of a lane is not fenced from the
# first (cdcworker.backfill.job.check_spark_conf); the CRD already rejects "true".
FORCED_SPARK_CONF = {"spark.speculation": "false"}
LABEL_BACKFILL = f"{naming.PREFIX}/backfill"
# Not ``shardcdc.io/connector``: that label selects worker pods (status.selector, the scale subresource).
LABEL_BACKFILL_OF = f"{naming.PREFIX}/backfill-of"
COMPONENT = "backfill"
INITIAL_ID = INITIAL_BACKFILL
DEFAULT_TTL_SECONDS = 86_400
MAX_RUN_NAME = 48  # room for Spark's "-driver" and executor suffixes within a DNS label

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "Pending", "Running", "Succeeded", "Failed", "Cancelled"
FINAL = (SUCCEEDED, FAILED, CANCELLED)
SIGNAL_PREFIX = "sig-"  # ids of signal-started runs (spec.backfills ids should not use it)
MAX_ID = 40  # spec.backfills[].id's maxLength
KEEP_CLOSED_SIGNAL_RUNS = 10  # finished signal runs still listed in status.backfills
LOCAL_COMMAND = "shardcdc"  # the image's entry point (local mode maps it to this interpreter's CLI)
Conditions = Mapping[str, str] | None


# --- what runs ---------------------------------------------------------------------------------------


def engine_of(cr: ConnectorResource) -> BackfillEngine | None:
    bf = cr.spec.snapshot.backfill
    return None if bf is None else bf.engine


def desired_requests(cr: ConnectorResource) -> list[BackfillRequest]:
    """``spec.backfills[]`` plus, for ``snapshot.mode: initial`` with an engine, the initial snapshot
    of every table (the first generation's workers start with them held back)."""
    out: list[BackfillRequest] = []
    if cr.spec.snapshot.backfill is not None and cr.spec.snapshot.mode.copies:
        out.append(BackfillRequest(INITIAL_ID, (".*",)))
    seen = {r.id for r in out}
    out.extend(r for r in cr.spec.backfills if r.id not in seen)
    return out


def run_name(connector: str, backfill_id: str) -> str:
    """``<connector>-bf-<id>``, shortened with a hash of the full name when too long."""
    name = f"{connector}-bf-{backfill_id}"
    if len(name) <= MAX_RUN_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: MAX_RUN_NAME - 9].rstrip('-.')}-{digest}"


def labels(cr: ConnectorResource, backfill_id: str) -> dict[str, str]:
    return {
        naming.LABEL_NAME: "shardcdc",
        naming.LABEL_INSTANCE: cr.name,
        naming.LABEL_COMPONENT: COMPONENT,
        naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
        LABEL_BACKFILL_OF: cr.name,
        LABEL_BACKFILL: backfill_id,
    }


def job_arguments(cr: ConnectorResource, req: BackfillRequest, conditions: Conditions = None) -> list[str]:
    """Arguments of ``shardcdc backfill`` / ``spark_main.py``. ``conditions`` (table -> condition)
    are a signal's per-table additional conditions; a spec entry has one for all its tables."""
    settings = dict(cr.spec.snapshot.backfill.spark) if cr.spec.snapshot.backfill is not None else {}
    args = ["--config", CONFIG_FILE, "--run-id", run_id(cr, req.id)]
    for table in req.tables:
        args += ["--table", table]
    if req.condition:
        args += ["--condition", f"{table_pattern(req.tables)}={req.condition}"]
    for table, condition in sorted((conditions or {}).items()):
        args += ["--condition", f"{re.escape(table)}={condition}"]
    for flag, key in (("--chunk-size", "chunkSize"), ("--max-concurrent-chunks", "maxConcurrentChunksPerShard"),
                      ("--rows-per-second", "rowsPerSecondPerShard")):
        if settings.get(key) is not None:
            args += [flag, str(settings[key])]
    if cr.spec.state == State.RUNNING:
        # The connector has workers: read a shard's chunks only once its worker holds the tables
        # back (the hand-shake, docs/backfill.md). A paused or stopped connector has none to wait
        # for; its workers hold the run late when they start.
        args.append("--await-holds")
    return args


def table_pattern(tables: Sequence[str]) -> str:
    """One regex matching any of the request's tables (the condition applies to all of them)."""
    return tables[0] if len(tables) == 1 else "(" + "|".join(tables) + ")"


# --- objects -------------------------------------------------------------------------------------------


def _meta(cr: ConnectorResource, name: str, backfill_id: str) -> JsonObject:
    return {
        "name": name,
        "namespace": cr.namespace,
        "labels": labels(cr, backfill_id),
        "ownerReferences": [owner_reference(cr)],
    }


def build_config_map(cr: ConnectorResource, req: BackfillRequest) -> JsonObject:
    name = run_name(cr.name, req.id)
    text = render_properties(shared_properties(cr), header=(  # a backfill is not a task: no task's identity
        f"CdcConnector {cr.namespace}/{cr.name}: backfill {req.id}",
        "Written by the shardcdc operator; edits are overwritten.",
    ))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cr, f"{name}-config", req.id),
            "data": {CONFIG_KEY: text}}


def _security_context() -> JsonObject:
    return {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _config_volume(cr: ConnectorResource, config_map: str) -> JsonObject:
    return {"name": "config", "projected": {"defaultMode": 0o440, "sources": _projected_sources(cr, config_map)}}


def _spark_settings(cr: ConnectorResource) -> JsonObject:
    bf = cr.spec.snapshot.backfill
    return dict(bf.spark) if bf is not None else {}


def build_spark_application(cr: ConnectorResource, req: BackfillRequest,
                            ttl_seconds: int = DEFAULT_TTL_SECONDS, conditions: Conditions = None) -> JsonObject:
    """The ``SparkApplication`` of one backfill (spark-operator v1beta2)."""
    s = _spark_settings(cr)
    name = run_name(cr.name, req.id)
    lbl = labels(cr, req.id)
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    pod = {"labels": lbl, "volumeMounts": mounts, "securityContext": _security_context()}
    driver: JsonObject = {**pod, "cores": 1, "memory": s.get("driverMemory", "1g")}
    if s.get("serviceAccount"):
        driver["serviceAccount"] = s["serviceAccount"]
    executor: JsonObject = {**pod, "instances": int(s.get("executorInstances", 2)),
                                "cores": int(s.get("executorCores", 1)), "memory": s.get("executorMemory", "1g")}
    return {
        "apiVersion": SPARK_API_VERSION,
        "kind": SPARK_KIND,
        "metadata": _meta(cr, name, req.id),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "sparkVersion": SPARK_VERSION,
            "image": s.get("image") or cr.spec.worker.image,
            "imagePullPolicy": cr.spec.worker.image_pull_policy,
            "mainApplicationFile": SPARK_MAIN,
            "arguments": job_arguments(cr, req, conditions),
            "sparkConf": {"spark.kubernetes.submission.waitAppCompletion": "false",
                          **{str(k): str(v) for k, v in (s.get("sparkConf") or {}).items()}, **FORCED_SPARK_CONF},
            # Chunks already done are skipped on a retry (progress topic): retrying is cheap and safe.
            "restartPolicy": {"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 30,
                              "onSubmissionFailureRetries": 3, "onSubmissionFailureRetryInterval": 30},
            "timeToLiveSeconds": ttl_seconds,
            "volumes": [_config_volume(cr, f"{name}-config")],
            "driver": driver,
            "executor": executor,
        },
    }


def _pod_template(cr: ConnectorResource, req: BackfillRequest, role: str) -> JsonObject:
    name = run_name(cr.name, req.id)
    metadata: JsonObject = {"labels": {**labels(cr, req.id), "spark-role": role}}
    if role == "driver":
        # The connector owns the driver; Spark makes the driver the controller of each executor, and
        # the API server refuses a pod with two controller references (found in a kind cluster:
        # "Only one reference can have Controller set to true"), so executors go with their driver.
        metadata["ownerReferences"] = [owner_reference(cr)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID, "fsGroup": WORKER_UID,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": f"spark-kubernetes-{role}", "securityContext": _security_context(),
                            "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]}],
            "volumes": [_config_volume(cr, f"{name}-config")],
        },
    }


def build_pod_templates(cr: ConnectorResource, req: BackfillRequest) -> JsonObject:
    """ConfigMap with the driver and executor pod templates of the sparkSubmit engine."""
    import json

    name = run_name(cr.name, req.id)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cr, f"{name}-templates", req.id),
            "data": {"driver.yaml": json.dumps(_pod_template(cr, req, "driver"), sort_keys=True),
                     "executor.yaml": json.dumps(_pod_template(cr, req, "executor"), sort_keys=True)}}


# The spark-submit Job's entrypoint. In cluster mode the driver is a pod of its own that nothing
# deletes when the Job is: a cancelled backfill would keep running. So the Job's container runs
# spark-submit as a child of this shell, and on SIGTERM (the Job deleted, its pod terminating)
# first kills the application the way Spark documents (`spark-submit --kill namespace:driver-pod`,
# which deletes the driver pod; its executors are owned by it), with the Job's own service account,
# which may manage pods since it creates the driver. The exit status is spark-submit's.
KILL_ON_TERM = (
    '"$@" & pid=$!\n'
    "trap 'spark-submit --kill \"$SHARDCDC_SPARK_DRIVER\" --master \"$SHARDCDC_SPARK_MASTER\"; "
    "kill -TERM \"$pid\" 2>/dev/null' TERM INT\n"
    'while :; do wait "$pid"; status=$?; kill -0 "$pid" 2>/dev/null || exit "$status"; done\n'
)
SPARK_K8S_MASTER = "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"


def spark_submit_command(cr: ConnectorResource, req: BackfillRequest, conditions: Conditions = None) -> list[str]:
    s = _spark_settings(cr)
    name = run_name(cr.name, req.id)
    image = s.get("image") or cr.spec.worker.image
    conf = {
        "spark.kubernetes.namespace": cr.namespace,
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.driver.pod.name": f"{name}-driver",
        "spark.kubernetes.submission.waitAppCompletion": "true",
        "spark.kubernetes.driver.podTemplateFile": "/tmpl/driver.yaml",
        "spark.kubernetes.executor.podTemplateFile": "/tmpl/executor.yaml",
        "spark.executor.instances": str(int(s.get("executorInstances", 2))),
        "spark.executor.cores": str(int(s.get("executorCores", 1))),
        "spark.executor.memory": str(s.get("executorMemory", "1g")),
        "spark.driver.memory": str(s.get("driverMemory", "1g")),
        **{f"spark.kubernetes.driver.label.{k}": v for k, v in labels(cr, req.id).items()},
        **{f"spark.kubernetes.executor.label.{k}": v for k, v in labels(cr, req.id).items()},
    }
    if s.get("serviceAccount"):
        conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = s["serviceAccount"]
    conf.update({str(k): str(v) for k, v in (s.get("sparkConf") or {}).items()})
    conf.update(FORCED_SPARK_CONF)
    cmd = ["spark-submit", "--master", SPARK_K8S_MASTER, "--deploy-mode", "cluster", "--name", name]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    return [*cmd, SPARK_MAIN, *job_arguments(cr, req, conditions)]


def build_submit_job(cr: ConnectorResource, req: BackfillRequest, ttl_seconds: int = DEFAULT_TTL_SECONDS,
                     conditions: Conditions = None) -> JsonObject:
    """A Job owned by the CdcConnector that runs spark-submit in cluster mode and waits for the app."""
    s = _spark_settings(cr)
    name = run_name(cr.name, req.id)
    pod_spec: JsonObject = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "spark-submit",
            "image": s.get("image") or cr.spec.worker.image,
            "imagePullPolicy": cr.spec.worker.image_pull_policy,
            "command": ["/bin/sh", "-c", KILL_ON_TERM, "spark-submit-job", *spark_submit_command(cr, req, conditions)],
            "env": [{"name": "SHARDCDC_SPARK_DRIVER", "value": f"{cr.namespace}:{name}-driver"},
                    {"name": "SHARDCDC_SPARK_MASTER", "value": SPARK_K8S_MASTER}],
            "securityContext": {**_security_context(), "readOnlyRootFilesystem": True},
            "volumeMounts": [{"name": "templates", "mountPath": "/tmpl", "readOnly": True},
                             {"name": "tmp", "mountPath": "/tmp"}],
        }],
        "volumes": [{"name": "templates", "configMap": {"name": f"{name}-templates"}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}],
    }
    if s.get("serviceAccount"):
        pod_spec["serviceAccountName"] = s["serviceAccount"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(cr, name, req.id),
        "spec": {
            "backoffLimit": 3,  # a resubmission resumes from the progress topic
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {"metadata": {"labels": labels(cr, req.id)}, "spec": pod_spec},
        },
    }


def build_local_job(cr: ConnectorResource, req: BackfillRequest, ttl_seconds: int = DEFAULT_TTL_SECONDS,
                    conditions: Conditions = None) -> JsonObject:
    """The ``local`` engine in local mode: a Job whose one container runs ``shardcdc backfill``
    (threads, no Spark) with the connector's configuration; local mode's job runner starts it as
    a child process of ``shardcdc run`` and reports the Job's status like the Job controller."""
    name = run_name(cr.name, req.id)
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    container = {"name": "backfill", "image": cr.spec.worker.image, "imagePullPolicy": cr.spec.worker.image_pull_policy,
                 "command": [LOCAL_COMMAND, "backfill", "--engine", "local", "--no-view",
                             *job_arguments(cr, req, conditions)],
                 "securityContext": {**_security_context(), "readOnlyRootFilesystem": True},
                 "volumeMounts": mounts}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(cr, name, req.id),
        "spec": {
            "backoffLimit": 3,  # a retry resumes from the progress topic
            "ttlSecondsAfterFinished": ttl_seconds,
            "template": {"metadata": {"labels": labels(cr, req.id)},
                         "spec": {"restartPolicy": "Never", "containers": [container],
                                  "volumes": [_config_volume(cr, f"{name}-config")]}},
        },
    }


def build_objects(cr: ConnectorResource, req: BackfillRequest, conditions: Conditions = None,
                  local_jobs: bool = False) -> list[JsonObject]:
    """Everything one backfill needs, in creation order ([] for the local engine, except in local
    mode, ``local_jobs``, where it is a Job that runs ``shardcdc backfill``)."""
    engine = engine_of(cr)
    if engine == BackfillEngine.SPARK_OPERATOR:
        return [build_config_map(cr, req), build_spark_application(cr, req, conditions=conditions)]
    if engine == BackfillEngine.SPARK_SUBMIT:
        return [build_config_map(cr, req), build_pod_templates(cr, req), build_submit_job(cr, req, conditions=conditions)]
    if engine == BackfillEngine.LOCAL and local_jobs:
        return [build_config_map(cr, req), build_local_job(cr, req, conditions=conditions)]
    return []


# --- state ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Phase:
    phase: str
    message: str = ""
    finished_at: str | None = None


_SPARK_RUNNING = {"SUBMITTED", "RUNNING", "PENDING_RERUN", "SUCCEEDING", "FAILING", "INVALIDATING", "RESUMING",
                  "UNKNOWN"}


def phase_of_spark_application(app: JsonMapping | None) -> Phase:
    """spark-operator ``status.applicationState.state`` -> our phase (never the raw string)."""
    if app is None:
        return Phase(PENDING, "not created yet")
    status = app.get("status") or {}
    state = str((status.get("applicationState") or {}).get("state") or "")
    error = str((status.get("applicationState") or {}).get("errorMessage") or "")
    finished = status.get("terminationTime")
    if state == "COMPLETED":
        return Phase(SUCCEEDED, "Spark application completed", finished)
    if state in ("FAILED", "SUBMISSION_FAILED"):
        return Phase(FAILED, error or f"Spark application {state.lower().replace('_', ' ')}", finished)
    if state in ("SUSPENDING", "SUSPENDED"):
        return Phase(PENDING, "Spark application suspended")
    if state in _SPARK_RUNNING:
        return Phase(RUNNING, f"Spark application {state.lower().replace('_', ' ')}")
    return Phase(PENDING, "waiting for the spark-operator")


def phase_of_job(job: JsonMapping | None) -> Phase:
    """A spark-submit Job's status -> our phase (its conditions Complete / Failed)."""
    if job is None:
        return Phase(PENDING, "not created yet")
    status = job.get("status") or {}
    for cond in status.get("conditions") or ():
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Complete":
            return Phase(SUCCEEDED, "spark-submit completed", status.get("completionTime"))
        if cond.get("type") == "Failed":
            return Phase(FAILED, str(cond.get("message") or cond.get("reason") or "spark-submit failed"),
                         cond.get("lastTransitionTime"))
    if status.get("active"):
        return Phase(RUNNING, "spark-submit running")
    return Phase(PENDING, "waiting for the Job's pod")


def status_entry(req: BackfillRequest, phase: Phase, engine: BackfillEngine | None, name: str,
                 previous: JsonMapping | None, now: str,
                 progress: JsonMapping | None = None, signal_id: str | None = None) -> JsonObject:
    """One ``status.backfills[]`` item. ``progress`` (from the progress topic) gives the counts and,
    when the job recorded them, the start and end times; a ``startTime`` once set is kept, and set
    to ``now`` when the run is first seen running with no time from the job."""
    prev = dict(previous or {})
    prog = dict(progress or {})
    entry: JsonObject = {"id": req.id, "phase": phase.phase, "message": phase.message, "runName": name,
                             "engine": str(engine) if engine is not None else "local"}
    if signal_id is not None:
        entry["source"], entry["signalId"] = "signal", signal_id
    start = prev.get("startTime") or prog.get("startTime")
    if start is None and phase.phase in (RUNNING, SUCCEEDED, FAILED):
        start = now
    if start is not None:
        entry["startTime"] = start
    if phase.phase in FINAL:
        entry["completionTime"] = prev.get("completionTime") or phase.finished_at or prog.get("completionTime") or now
    for key in ("chunksDone", "chunksTotal", "rows"):
        value = prog.get(key, prev.get(key))
        if value is not None:
            entry[key] = int(value)
    return entry


def backfill_condition(entries: Iterable[JsonMapping]) -> ConditionSpec:
    """``BackfillRunning``: True while any backfill is pending or running."""
    items = list(entries)
    active = [e["id"] for e in items if e.get("phase") in (PENDING, RUNNING)]
    failed = [e["id"] for e in items if e.get("phase") == FAILED]
    if active:
        return ConditionSpec(BACKFILL_RUNNING, True, "BackfillInProgress", "running: " + ", ".join(active))
    if failed:
        return ConditionSpec(BACKFILL_RUNNING, False, "BackfillFailed", "failed: " + ", ".join(failed))
    if items:
        cancelled = sum(1 for e in items if e.get("phase") == CANCELLED)
        text = f"{len(items) - cancelled} backfill(s) succeeded" + (f", {cancelled} cancelled" if cancelled else "")
        return ConditionSpec(BACKFILL_RUNNING, False, "BackfillsComplete", text)
    return ConditionSpec(BACKFILL_RUNNING, False, "NoBackfill", "")


def to_cancel(cr: ConnectorResource, existing: Iterable[JsonMapping], wanted: Iterable[str] | None = None,
              keep_signal_runs: bool = False) -> list[JsonMapping]:
    """Owned backfill objects whose request is gone (cancellation by deletion). ``wanted``: the ids
    still to run (default: the spec's); ``keep_signal_runs`` spares signal-started runs while the
    progress topic has not been read (the operator does not know yet which are still wanted)."""
    want = {r.id for r in desired_requests(cr)} if wanted is None else set(wanted)
    out = []
    for obj in existing:
        meta = obj.get("metadata") or {}
        lbl = meta.get("labels") or {}
        bid = str(lbl.get(LABEL_BACKFILL) or "")
        if lbl.get(LABEL_BACKFILL_OF) != cr.name or bid in want:
            continue
        if keep_signal_runs and bid.startswith(SIGNAL_PREFIX):
            continue
        out.append(obj)
    return out


# --- signal-started runs (pure) ---------------------------------------------------------------------


def signal_backfill_id(signal_id: str) -> str:
    """A DNS-label id for a signal's run: ``sig-<signal id>``, with a hash when the signal id is not
    already a short DNS label (signal ids are free text, often UUIDs)."""
    slug = re.sub(r"[^a-z0-9]+", "-", signal_id.lower()).strip("-")
    plain = f"{SIGNAL_PREFIX}{slug}"
    if slug and slug == signal_id and len(plain) <= MAX_ID:
        return plain
    digest = hashlib.sha256(signal_id.encode()).hexdigest()[:8]
    room = MAX_ID - len(SIGNAL_PREFIX) - 9
    return f"{SIGNAL_PREFIX}{slug[:room].strip('-')}-{digest}" if slug else f"{SIGNAL_PREFIX}{digest}"


@dataclass(frozen=True)
class Launch:
    """One run the operator manages: a spec entry, the initial snapshot, or a signal's request."""

    req: BackfillRequest
    conditions: Mapping[str, str] = field(default_factory=dict)  # per table (signals)
    signal_id: str | None = None
    cancelled_by: str | None = None  # the stop-snapshot signal that cancelled it
    closed: bool = False  # the operator recorded its end in the progress topic: never launched again

    @property
    def active(self) -> bool:
        return self.cancelled_by is None and not self.closed


def launches(cr: ConnectorResource, view: backfillfeed.FeedView | None,
             previous: Mapping[str, JsonMapping]) -> list[Launch]:
    """The spec's requests, then the signals' (once the progress topic has been read), each id once.
    Closed signal runs stay listed while the status has them, the newest ``KEEP_CLOSED_SIGNAL_RUNS``."""
    out = [Launch(r) for r in desired_requests(cr)]
    if view is None or not view.ready:
        return out
    seen = {x.req.id for x in out}
    for rec in view.signals:
        bid = signal_backfill_id(rec.signal_id)
        if bid in seen or not rec.tables:
            continue
        seen.add(bid)
        out.append(Launch(BackfillRequest(bid, rec.tables), dict(rec.conditions), rec.signal_id,
                          view.stopped.get(rec.signal_id), rec.signal_id in view.closed))
    closed = [x for x in out if x.closed]
    drop = {x.req.id for x in closed[:-KEEP_CLOSED_SIGNAL_RUNS]} | {x.req.id for x in closed if x.req.id not in previous}
    return [x for x in out if x.req.id not in drop]


def feed_needed(cr: ConnectorResource, previous: Mapping[str, JsonMapping]) -> bool:
    """Read the progress topic for connectors with a backfill engine (snapshot signals arrive
    through it, and a cancelled or failed run is released through it, which may take several
    reconciles while its pods stop), or with runs not finished yet. Others make no Kafka call."""
    if cr.spec.snapshot.backfill is not None:
        return True
    if any(e.get("phase") not in FINAL for e in previous.values()):
        return True
    return any(r.id not in previous for r in desired_requests(cr))


def progress_of(view: backfillfeed.FeedView | None, rid: str) -> JsonObject | None:
    """Status fields of one run from the progress topic (None when it has nothing on the run)."""
    summary = view.runs.get(rid) if view is not None else None
    if not summary:
        return None
    out: JsonObject = {k: summary[k] for k in ("chunksDone", "chunksTotal", "rows")}
    if summary.get("started_ms"):
        out["startTime"] = backfillfeed.rfc3339(int(summary["started_ms"]))
    if summary.get("finished_ms"):
        out["completionTime"] = backfillfeed.rfc3339(int(summary["finished_ms"]))
    for key in ("state", "error"):
        if summary.get(key):
            out[key] = summary[key]
    return out


def refine(phase: Phase, progress: JsonMapping | None) -> Phase:
    """The Spark/Job phase with the job's own error (the object's state only says "failed")."""
    if progress is None or not progress.get("error"):
        return phase
    if phase.phase == FAILED:
        return Phase(FAILED, str(progress["error"]), phase.finished_at)
    if phase.phase == RUNNING and progress.get("state") == "failed":
        return Phase(RUNNING, f"{phase.message}; the last attempt failed: {progress['error']}")
    return phase


def phase_from_progress(progress: JsonMapping | None, previous: JsonMapping | None,
                        pending: str) -> Phase:
    """The ``local`` engine outside local mode runs next to the workers: its phase is what the job
    recorded in the progress topic."""
    state = (progress or {}).get("state")
    if state in ("succeeded", "complete"):
        return Phase(SUCCEEDED, "backfill completed", (progress or {}).get("completionTime"))
    if state == "failed":
        return Phase(FAILED, str((progress or {}).get("error") or "backfill failed"), (progress or {}).get("completionTime"))
    if state == "running":
        return Phase(RUNNING, "backfill running")
    if previous is not None and previous.get("phase") in FINAL:
        return Phase(str(previous["phase"]), str(previous.get("message") or ""))
    return Phase(PENDING, pending)


# --- reconcile (I/O through the operator's KubeApi) -------------------------------------------------


def _kinds() -> dict[str, Kind]:
    return {
        "SparkApplication": Kind(f"/apis/{SPARK_API_VERSION}", "sparkapplications"),
        "Job": Kind("/apis/batch/v1", "jobs"),
        "ConfigMap": CONFIG_MAPS,
    }


def _refusal(kind: str, status: int, engine: BackfillEngine) -> str:
    """Why a backfill cannot be created, for its status (retried at every resync, not an error)."""
    if status == 404:
        return f"cannot create the {kind}: its API is not served (is the spark-operator's CRD installed?)"
    return f"cannot create the {kind}: forbidden (enable rbac.backfills.{engine} in the shardcdc chart)"


def selector(cr: ConnectorResource) -> str:
    return f"{LABEL_BACKFILL_OF}={cr.name}"


async def _launched_phase(kube: ClusterApi, kinds: Mapping[str, Kind], objects: Sequence[JsonMapping],
                          live: dict[tuple[str, str], JsonObject], name: str, finished: bool,
                          prev: JsonMapping | None, progress: JsonMapping | None,
                          engine: BackfillEngine) -> Phase:
    """A run the operator launches: create its missing objects (unless finished), then its phase
    from the main object and the progress topic."""
    main_kind = objects[-1]["kind"]
    refused = ""
    if not finished:
        for obj in objects:
            key = (obj["kind"], obj["metadata"]["name"])
            if key not in live:
                try:
                    made = await kube.create(kinds[obj["kind"]], obj)
                except ApiError as exc:
                    if exc.status not in (403, 404):
                        raise
                    refused = _refusal(obj["kind"], exc.status, engine)
                    break
                if made is not None:
                    live[key] = made
    app = live.get((main_kind, name))
    if refused:
        return Phase(PENDING, refused)
    if app is None and finished and prev is not None:
        # Its objects are gone (released after the failure): the job's own error may still
        # arrive through the progress topic after Spark's generic one was recorded.
        return refine(Phase(str(prev["phase"]), str(prev.get("message") or "")), progress)
    if main_kind == "SparkApplication":
        return refine(phase_of_spark_application(app), progress)
    return refine(phase_of_job(app), progress)


async def reconcile_backfills(kube: ClusterApi, cr: ConnectorResource, existing_status: JsonMapping,
                              now: str, feeds: backfillfeed.ProgressFeeds | None = None,
                              access: KafkaAccess | None = None) -> tuple[list[JsonObject], ConditionSpec]:
    """Create missing backfill objects, delete cancelled ones, and compute ``status.backfills`` and
    the ``BackfillRunning`` condition. Finished runs are not resubmitted (their objects may be gone
    after the TTL).

    Runs come from the spec and, through the progress topic (``feeds``), from ``execute-snapshot``
    signals; a ``stop-snapshot`` cancels the signal runs before it. Counts, times and the job's
    error come from the progress topic too. Both engines' kinds are listed whatever the engine, so a
    request removed after an engine change is still cancelled; a kind that is not served (no
    spark-operator CRD) or not granted (the chart's ``rbac.backfills.*`` switched off) lists as
    empty. ``kube.runs_local_jobs`` (local mode) makes the ``local`` engine a Job too.
    """
    engine, kinds = engine_of(cr), _kinds()
    feeds = feeds if feeds is not None else backfillfeed.FEEDS
    local_jobs = bool(getattr(kube, "runs_local_jobs", False))
    previous = {str(e.get("id")): e for e in existing_status.get("backfills") or ()}
    view = feeds.view(cr, access) if feed_needed(cr, previous) else None
    ready = view is not None and view.ready
    plan = launches(cr, view, previous)
    listed: list[JsonObject] = []
    for k in ("SparkApplication", "Job", "ConfigMap"):
        listed += [{**o, "kind": k} for o in await kube.list_labelled(kinds[k], cr.namespace, selector(cr))]
    for obj in to_cancel(cr, listed, {x.req.id for x in plan if x.active}, keep_signal_runs=not ready):
        await kube.delete(kinds[obj["kind"]], cr.namespace, obj["metadata"]["name"])
    live = {(o["kind"], o["metadata"]["name"]): o for o in listed}
    entries: list[JsonObject] = []
    ended: dict[str, str] = {}  # run id -> why it will not finish (backfillrelease)
    # One run at a time per connector: a worker holds one run per shard, so a second run started
    # beside it would wait for holds that never come (its hold timeout, then retries, then failed).
    # The next one starts once the first has finished; one already started (objects exist) goes on.
    running: str | None = None
    for launch in plan:
        req = launch.req
        name = run_name(cr.name, req.id)
        prev = previous.get(req.id)
        finished = prev is not None and prev.get("phase") in FINAL
        progress = progress_of(view, run_id(cr, req.id))
        objects = build_objects(cr, req, launch.conditions, local_jobs)
        if not launch.active:
            end = view.closed.get(launch.signal_id or "") if view is not None else None
            if finished and prev is not None:
                # Closed on Spark's generic error: the job's own may still arrive through the topic.
                phase = refine(Phase(str(prev["phase"]), str(prev.get("message") or "")), progress)
            elif end is not None:
                phase = Phase(end.phase, end.message)
            else:
                phase = Phase(CANCELLED, f"stopped by signal {launch.cancelled_by}", now)
        elif objects and not finished and running is not None \
                and (objects[-1]["kind"], name) not in live:
            phase = Phase(PENDING, f"queued: starts when backfill {running} has finished (one run at a time "
                                   "per connector, as the workers hold one run per shard)")
        elif objects:
            phase = await _launched_phase(kube, kinds, objects, live, name, finished, prev, progress,
                                          engine or BackfillEngine.LOCAL)
        else:
            phase = phase_from_progress(progress, prev, f"local engine: run `shardcdc backfill --run-id "
                                                        f"{run_id(cr, req.id)}` next to the workers")
        entries.append(status_entry(req, phase, engine, name, prev, now, progress, launch.signal_id))
        if launch.active and objects and phase.phase not in FINAL and running is None:
            running = req.id
        if not launch.active:
            ended[run_id(cr, req.id)] = f"cancelled: {phase.message}"
        elif phase.phase == FAILED and objects:  # an engine the operator runs failed for good
            ended[run_id(cr, req.id)] = f"failed: {phase.message}"
        if launch.signal_id is not None and phase.phase in FINAL and ready and view is not None \
                and launch.signal_id not in view.closed:
            feeds.close_signal(cr, SignalClosed(launch.signal_id, cr.spec.source.keyspace, phase.phase, phase.message),
                               access)
    if ready and view is not None:
        wanted = {run_id(cr, x.req.id): x.req.id for x in plan if x.active}
        releases = backfillrelease.to_release(cr.uid, view.runs, wanted, ended)
        await backfillrelease.release(kube, cr.namespace, selector(cr), cr.spec.source.keyspace, releases,
                                      lambda rec: feeds.abandon(cr, rec, access), LABEL_BACKFILL)
    if not ready:
        # Signal runs known only from the status: kept as they are until the topic has been read.
        ids = {e["id"] for e in entries}
        entries += [dict(e) for e in existing_status.get("backfills") or ()
                    if e.get("source") == "signal" and e.get("id") not in ids]
    return entries, backfill_condition(entries)


def needs_reconcile(cr: ConnectorResource, existing_status: JsonMapping) -> bool:
    """Whether a reconcile needs :func:`reconcile_backfills` at all: an engine is configured, a run is
    requested, or ``status.backfills`` still lists runs (their cancellation and the status's reset).
    Connectors without backfills get no ``BackfillRunning`` condition and no extra API reads."""
    return cr.spec.snapshot.backfill is not None or bool(cr.spec.backfills) or bool(existing_status.get("backfills"))
