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
    the job runs in-process (``shardcdc backfill``, local mode): nothing to create here.

Names are deterministic (``<connector>-bf-<id>``), so a resubmission is idempotent (create once,
409 means it exists), and the run id given to the job is stable too: a Spark retry or a recreated
application resumes from the progress topic instead of starting over. Deleting a request from
``spec.backfills`` (or a ``stop-snapshot`` signal) cancels it: its objects are deleted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, ApiError, ClusterApi, Kind
from cdcoperator.conditions import BACKFILL_RUNNING, ConditionSpec
from cdcoperator.model import BackfillEngine, BackfillRequest, ConnectorResource
from cdcoperator.objects import (
    CONFIG_DIR,
    CONFIG_FILE,
    CONFIG_KEY,
    WORKER_UID,
    _projected_sources,
    owner_reference,
    render_properties,
    worker_properties,
)
from cdcoperator.planner import TaskPlan

SPARK_API_VERSION = "sparkoperator.k8s.io/v1beta2"
SPARK_KIND = "SparkApplication"
SPARK_VERSION = "4.0.0"
# The Spark image ships the job's entry point here (see docs/backfill.md, "Image").
SPARK_MAIN = "local:///opt/shardcdc/spark_main.py"
LABEL_BACKFILL = f"{naming.PREFIX}/backfill"
# Not ``shardcdc.io/connector``: that label selects worker pods (status.selector, the scale subresource).
LABEL_BACKFILL_OF = f"{naming.PREFIX}/backfill-of"
COMPONENT = "backfill"
INITIAL_ID = "initial"
DEFAULT_TTL_SECONDS = 86_400
MAX_RUN_NAME = 48  # room for Spark's "-driver" and executor suffixes within a DNS label

PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
# Per-task keys of the worker configuration: a backfill is not a task.
_TASK_KEYS = ("tasks.max", "vitess.offset.storage.per.task", "vitess.offset.storage.task.key.gen",
              "vitess.prev.num.tasks", "shardcdc.task.id", "shardcdc.task.count", "shardcdc.task.generation",
              "shardcdc.task.prev.count", "shardcdc.task.shards")


# --- what runs ---------------------------------------------------------------------------------------


def engine_of(cr: ConnectorResource) -> BackfillEngine | None:
    bf = cr.spec.snapshot.backfill
    return None if bf is None else bf.engine


def desired_requests(cr: ConnectorResource) -> list[BackfillRequest]:
    """``spec.backfills[]`` plus, for ``snapshot.mode: initial`` with an engine, the initial snapshot
    of every table (the first generation's workers start with them held back)."""
    out: list[BackfillRequest] = []
    if cr.spec.snapshot.backfill is not None and cr.spec.snapshot.mode in ("initial", "initial_only"):
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


def run_id(cr: ConnectorResource, backfill_id: str) -> str:
    """The job's run id (progress-topic keys): stable across resubmissions, unique per connector object."""
    return f"{backfill_id}-{cr.uid[:8]}" if cr.uid else backfill_id


def labels(cr: ConnectorResource, backfill_id: str) -> dict[str, str]:
    return {
        naming.LABEL_NAME: "shardcdc",
        naming.LABEL_INSTANCE: cr.name,
        naming.LABEL_COMPONENT: COMPONENT,
        naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
        LABEL_BACKFILL_OF: cr.name,
        LABEL_BACKFILL: backfill_id,
    }


def backfill_properties(cr: ConnectorResource) -> dict[str, str]:
    """The connector's worker configuration without per-task keys (secrets stay ``${file:...}``)."""
    props = worker_properties(cr, TaskPlan(0, 0, 1, 0, (), True))
    for key in _TASK_KEYS:
        props.pop(key, None)
    return props


def job_arguments(cr: ConnectorResource, req: BackfillRequest) -> list[str]:
    """Arguments of ``shardcdc backfill`` / ``spark_main.py``."""
    settings = dict(cr.spec.snapshot.backfill.spark) if cr.spec.snapshot.backfill is not None else {}
    args = ["--config", CONFIG_FILE, "--run-id", run_id(cr, req.id)]
    for table in req.tables:
        args += ["--table", table]
    if req.condition:
        args += ["--condition", f"{table_pattern(req.tables)}={req.condition}"]
    for flag, key in (("--chunk-size", "chunkSize"), ("--max-concurrent-chunks", "maxConcurrentChunksPerShard"),
                      ("--rows-per-second", "rowsPerSecondPerShard")):
        if settings.get(key) is not None:
            args += [flag, str(settings[key])]
    return args


def table_pattern(tables: Sequence[str]) -> str:
    """One regex matching any of the request's tables (the condition applies to all of them)."""
    return tables[0] if len(tables) == 1 else "(" + "|".join(tables) + ")"


# --- objects -------------------------------------------------------------------------------------------


def _meta(cr: ConnectorResource, name: str, backfill_id: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": cr.namespace,
        "labels": labels(cr, backfill_id),
        "ownerReferences": [owner_reference(cr)],
    }


def build_config_map(cr: ConnectorResource, req: BackfillRequest) -> dict[str, Any]:
    name = run_name(cr.name, req.id)
    text = render_properties(backfill_properties(cr), header=(
        f"CdcConnector {cr.namespace}/{cr.name}: backfill {req.id}",
        "Written by the shardcdc operator; edits are overwritten.",
    ))
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cr, f"{name}-config", req.id),
            "data": {CONFIG_KEY: text}}


def _security_context() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_UID,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _config_volume(cr: ConnectorResource, config_map: str) -> dict[str, Any]:
    return {"name": "config", "projected": {"defaultMode": 0o440, "sources": _projected_sources(cr, config_map)}}


def _spark_settings(cr: ConnectorResource) -> dict[str, Any]:
    bf = cr.spec.snapshot.backfill
    return dict(bf.spark) if bf is not None else {}


def build_spark_application(cr: ConnectorResource, req: BackfillRequest,
                            ttl_seconds: int = DEFAULT_TTL_SECONDS) -> dict[str, Any]:
    """The ``SparkApplication`` of one backfill (spark-operator v1beta2)."""
    s = _spark_settings(cr)
    name = run_name(cr.name, req.id)
    lbl = labels(cr, req.id)
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    pod = {"labels": lbl, "volumeMounts": mounts, "securityContext": _security_context()}
    driver: dict[str, Any] = {**pod, "cores": 1, "memory": s.get("driverMemory", "1g")}
    if s.get("serviceAccount"):
        driver["serviceAccount"] = s["serviceAccount"]
    executor: dict[str, Any] = {**pod, "instances": int(s.get("executorInstances", 2)),
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
            "arguments": job_arguments(cr, req),
            "sparkConf": {"spark.kubernetes.submission.waitAppCompletion": "false",
                          **{str(k): str(v) for k, v in (s.get("sparkConf") or {}).items()}},
            # Chunks already done are skipped on a retry (progress topic): retrying is cheap and safe.
            "restartPolicy": {"type": "OnFailure", "onFailureRetries": 3, "onFailureRetryInterval": 30,
                              "onSubmissionFailureRetries": 3, "onSubmissionFailureRetryInterval": 30},
            "timeToLiveSeconds": ttl_seconds,
            "volumes": [_config_volume(cr, f"{name}-config")],
            "driver": driver,
            "executor": executor,
        },
    }


def _pod_template(cr: ConnectorResource, req: BackfillRequest, role: str) -> dict[str, Any]:
    name = run_name(cr.name, req.id)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"labels": {**labels(cr, req.id), "spark-role": role}, "ownerReferences": [owner_reference(cr)]},
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID, "fsGroup": WORKER_UID,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": f"spark-kubernetes-{role}", "securityContext": _security_context(),
                            "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]}],
            "volumes": [_config_volume(cr, f"{name}-config")],
        },
    }


def build_pod_templates(cr: ConnectorResource, req: BackfillRequest) -> dict[str, Any]:
    """ConfigMap with the driver and executor pod templates of the sparkSubmit engine."""
    import json

    name = run_name(cr.name, req.id)
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(cr, f"{name}-templates", req.id),
            "data": {"driver.yaml": json.dumps(_pod_template(cr, req, "driver"), sort_keys=True),
                     "executor.yaml": json.dumps(_pod_template(cr, req, "executor"), sort_keys=True)}}


def spark_submit_command(cr: ConnectorResource, req: BackfillRequest) -> list[str]:
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
    cmd = ["spark-submit", "--master", "k8s://https://$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)",
           "--deploy-mode", "cluster", "--name", name]
    for k, v in conf.items():
        cmd += ["--conf", f"{k}={v}"]
    return [*cmd, SPARK_MAIN, *job_arguments(cr, req)]


def build_submit_job(cr: ConnectorResource, req: BackfillRequest, ttl_seconds: int = DEFAULT_TTL_SECONDS) -> dict[str, Any]:
    """A Job owned by the CdcConnector that runs spark-submit in cluster mode and waits for the app."""
    s = _spark_settings(cr)
    name = run_name(cr.name, req.id)
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "spark-submit",
            "image": s.get("image") or cr.spec.worker.image,
            "imagePullPolicy": cr.spec.worker.image_pull_policy,
            "command": spark_submit_command(cr, req),
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


def build_objects(cr: ConnectorResource, req: BackfillRequest) -> list[dict[str, Any]]:
    """Everything one backfill needs, in creation order ([] for the local engine)."""
    engine = engine_of(cr)
    if engine == BackfillEngine.SPARK_OPERATOR:
        return [build_config_map(cr, req), build_spark_application(cr, req)]
    if engine == BackfillEngine.SPARK_SUBMIT:
        return [build_config_map(cr, req), build_pod_templates(cr, req), build_submit_job(cr, req)]
    return []


# --- state ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Phase:
    phase: str
    message: str = ""
    finished_at: str | None = None


_SPARK_RUNNING = {"SUBMITTED", "RUNNING", "PENDING_RERUN", "SUCCEEDING", "FAILING", "INVALIDATING", "RESUMING",
                  "UNKNOWN"}


def phase_of_spark_application(app: Mapping[str, Any] | None) -> Phase:
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


def phase_of_job(job: Mapping[str, Any] | None) -> Phase:
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
                 previous: Mapping[str, Any] | None, now: str,
                 progress: Mapping[str, int] | None = None) -> dict[str, Any]:
    """One ``status.backfills[]`` item; ``startTime`` is kept from the previous status."""
    prev = dict(previous or {})
    entry: dict[str, Any] = {"id": req.id, "phase": phase.phase, "message": phase.message, "runName": name,
                             "engine": str(engine) if engine is not None else "local"}
    start = prev.get("startTime")
    if start is None and phase.phase in (RUNNING, SUCCEEDED, FAILED):
        start = now
    if start is not None:
        entry["startTime"] = start
    if phase.phase in (SUCCEEDED, FAILED):
        entry["completionTime"] = prev.get("completionTime") or phase.finished_at or now
    for key in ("chunksDone", "chunksTotal", "rows"):
        value = (progress or {}).get(key, prev.get(key))
        if value is not None:
            entry[key] = int(value)
    return entry


def backfill_condition(entries: Iterable[Mapping[str, Any]]) -> ConditionSpec:
    """``BackfillRunning``: True while any backfill is pending or running."""
    items = list(entries)
    active = [e["id"] for e in items if e.get("phase") in (PENDING, RUNNING)]
    failed = [e["id"] for e in items if e.get("phase") == FAILED]
    if active:
        return ConditionSpec(BACKFILL_RUNNING, True, "BackfillInProgress", "running: " + ", ".join(active))
    if failed:
        return ConditionSpec(BACKFILL_RUNNING, False, "BackfillFailed", "failed: " + ", ".join(failed))
    if items:
        return ConditionSpec(BACKFILL_RUNNING, False, "BackfillsComplete", f"{len(items)} backfill(s) succeeded")
    return ConditionSpec(BACKFILL_RUNNING, False, "NoBackfill", "")


def to_cancel(cr: ConnectorResource, existing: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Owned backfill objects whose request is gone from the spec (cancellation by deletion)."""
    wanted = {r.id for r in desired_requests(cr)}
    out = []
    for obj in existing:
        meta = obj.get("metadata") or {}
        lbl = meta.get("labels") or {}
        if lbl.get(LABEL_BACKFILL_OF) == cr.name and lbl.get(LABEL_BACKFILL) not in wanted:
            out.append(obj)
    return out


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


async def reconcile_backfills(kube: ClusterApi, cr: ConnectorResource, existing_status: Mapping[str, Any],
                              now: str) -> tuple[list[dict[str, Any]], ConditionSpec]:
    """Create missing backfill objects, delete cancelled ones, and compute ``status.backfills`` and
    the ``BackfillRunning`` condition. Finished runs are not resubmitted (their objects may be gone
    after the TTL).

    Both engines' kinds are listed whatever the engine, so a request removed after an engine change
    is still cancelled; a kind that is not served (no spark-operator CRD) or not granted (the chart's
    ``rbac.backfills.*`` switched off) lists as empty.
    """
    engine = engine_of(cr)
    kinds = _kinds()
    listed: list[dict[str, Any]] = []
    for k in ("SparkApplication", "Job", "ConfigMap"):
        listed += [{**o, "kind": k} for o in await kube.list_labelled(kinds[k], cr.namespace, selector(cr))]
    for obj in to_cancel(cr, listed):
        await kube.delete(kinds[obj["kind"]], cr.namespace, obj["metadata"]["name"])
    live = {(o["kind"], o["metadata"]["name"]): o for o in listed}
    previous = {str(e.get("id")): e for e in existing_status.get("backfills") or ()}
    entries: list[dict[str, Any]] = []
    for req in desired_requests(cr):
        name = run_name(cr.name, req.id)
        prev = previous.get(req.id)
        finished = prev is not None and prev.get("phase") in (SUCCEEDED, FAILED)
        if engine == BackfillEngine.SPARK_OPERATOR or engine == BackfillEngine.SPARK_SUBMIT:
            main_kind = "SparkApplication" if engine == BackfillEngine.SPARK_OPERATOR else "Job"
            refused = ""
            if not finished:
                for obj in build_objects(cr, req):
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
                phase = Phase(PENDING, refused)
            elif app is None and finished and prev is not None:
                phase = Phase(str(prev["phase"]), str(prev.get("message") or ""))
            elif main_kind == "SparkApplication":
                phase = phase_of_spark_application(app)
            else:
                phase = phase_of_job(app)
        else:
            phase = Phase(str(prev["phase"]), str(prev.get("message") or "")) if prev else Phase(
                PENDING, f"local engine: run `shardcdc backfill --run-id {run_id(cr, req.id)}` next to the workers")
        entries.append(status_entry(req, phase, engine, name, prev, now))
    return entries, backfill_condition(entries)


def needs_reconcile(cr: ConnectorResource, existing_status: Mapping[str, Any]) -> bool:
    """Whether a reconcile needs :func:`reconcile_backfills` at all: an engine is configured, a run is
    requested, or ``status.backfills`` still lists runs (their cancellation and the status's reset).
    Connectors without backfills get no ``BackfillRunning`` condition and no extra API reads."""
    return cr.spec.snapshot.backfill is not None or bool(cr.spec.backfills) or bool(existing_status.get("backfills"))
