"""Pure builders of the child objects of a generation: one ConfigMap (the worker configuration its
tasks share) and a Deployment per task, whose environment carries the task's identity (its id,
shards and generation bookkeeping: ``SHARDCDC_*`` variables, which the worker layers over the file).

Why one ConfigMap per generation and not one per task: a generation of N tasks was 2N objects to
create, and the N ConfigMaps differed only in those few identity lines (issue 30: at 256 tasks half
of an apply's API writes). A worker reads the file once at start; the pod template carries the
ConfigMap's checksum, so a change of the shared configuration still rolls every task's pod.

Why a Deployment with one replica and ``strategy: Recreate`` rather than a bare Pod: a bare Pod on a
node that dies is never replaced (nothing recreates it until the operator notices), while the
Deployment controller reschedules it, restarts it on eviction, and lets ``paused`` scale to zero
without deleting the task's objects. ``Recreate`` terminates the old pod before starting a new one,
so at most one worker ever writes a task's offset key, even during a config roll-out.

Credentials never appear in the ConfigMap: Secrets are projected as files under
``/etc/shardcdc/secrets/`` and the config refers to them with ``${file:...}`` providers, which the
worker resolves at start.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from cdcoperator import naming
from cdcoperator.model import API_VERSION, KIND, ConnectorResource, worker_metrics_address
from cdcoperator.offsetslost import expected_env_var
from cdcoperator.planner import TaskPlan
from cdcworker import exitcodes
from cdcworker.backfill.taskhandoff import INITIAL_RUN_PROPERTY
from cdcworker.config import property_to_env
from cdcworker.config.model import SnapshotMode, TaskIdentity
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = [
    "CONFIG_DIR",
    "CONFIG_FILE",
    "CONFIG_KEY",
    "SECRETS_DIR",
    "WORKER_UID",
    "build_config_map",
    "build_deployment",
    "owner_reference",
    "render_properties",
    "shared_properties",
    "task_identity",
    "worker_properties",
]

CONFIG_DIR = "/etc/shardcdc"
CONFIG_KEY = "worker.properties"
CONFIG_FILE = f"{CONFIG_DIR}/{CONFIG_KEY}"
SECRETS_DIR = f"{CONFIG_DIR}/secrets"
WORKER_UID = 65532  # the distroless "nonroot" user
CONTAINER_NAME = "worker"
DEFAULT_RESOURCES: JsonObject = {
    "requests": {"cpu": "250m", "memory": "256Mi"},
    "limits": {"memory": "1Gi"},
}
# The worker flushes and commits within shardcdc.shutdown.grace.ms (30 s by default) after SIGTERM.
TERMINATION_GRACE_SECONDS = 45
INITIAL_BACKFILL = "initial"  # the backfill id of an initial snapshot made by the backfill engine


def owner_reference(cr: ConnectorResource) -> JsonObject:
    """Controller reference to the CdcConnector, so garbage collection removes children with it."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": cr.name,
        "uid": cr.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


# --- the worker configuration -------------------------------------------------------------------------


def _secret_file(volume: str, key: str) -> str:
    return f"{SECRETS_DIR}/{volume}/{key}"


def _file_ref(volume: str, key: str) -> str:
    # Whole-file form of the file provider: Secret files usually end with a newline, which it drops.
    return "${file:" + _secret_file(volume, key) + "}"


def backfill_run_id(cr: ConnectorResource, backfill_id: str) -> str:
    """A backfill's run id (progress-topic keys): stable across resubmissions, unique per connector object."""
    return f"{backfill_id}-{cr.uid[:8]}" if cr.uid else backfill_id


def task_identity(task: TaskPlan) -> dict[str, str]:
    """The properties of one task's identity and generation bookkeeping, in write order (the
    worker's own type writes them: ``TaskIdentity.properties``)."""
    # Generation 0 has no previous generation (prev_task_count -1 in status), but the worker, like
    # Debezium, insists on at least 1 once per-task offsets are on; it never reads generation -1.
    return TaskIdentity(per_task=True, task_id=task.task_id, task_count=task.task_count, tasks_max=task.task_count,
                        generation=task.generation, prev_task_count=max(task.prev_task_count, 1),
                        shards=task.shards, history=task.history).properties()


def worker_properties(cr: ConnectorResource, task: TaskPlan) -> dict[str, str]:
    """The worker's whole configuration for one task: the generation's shared properties and the
    task's identity (which wins, as the pod's environment wins over the file)."""
    return {**shared_properties(cr), **task_identity(task)}


def shared_properties(cr: ConnectorResource) -> dict[str, str]:
    """The configuration every task of the connector shares, in write order (operator-owned keys first)."""
    spec = cr.spec
    vt = spec.source
    props: dict[str, str] = {
        "name": cr.name,
        "topic.prefix": spec.kafka.topic_prefix,
        # source
        "database.hostname": vt.vtgate_host,
        "database.port": str(vt.vtgate_port),
        "vitess.keyspace": vt.keyspace,
        "vitess.tablet.type": vt.tablet_type,
    }
    if vt.credentials is not None:
        props["database.user"] = _file_ref("vitess-credentials", vt.credentials.username_key)
        props["database.password"] = _file_ref("vitess-credentials", vt.credentials.password_key)
    if vt.tls.enabled:
        props["shardcdc.vitess.tls.enabled"] = "true"
        if vt.tls.ca_secret_ref is not None:
            props["shardcdc.vitess.tls.ca.file"] = _secret_file("vitess-ca", vt.tls.ca_secret_ref.key)
        if vt.tls.client_cert_secret_ref is not None:
            props["shardcdc.vitess.tls.cert.file"] = _secret_file("vitess-client-cert", "tls.crt")
            props["shardcdc.vitess.tls.key.file"] = _secret_file("vitess-client-cert", "tls.key")
        if vt.tls.server_name:
            props["shardcdc.vitess.tls.server.name"] = vt.tls.server_name
    # Kafka
    props["bootstrap.servers"] = spec.kafka.bootstrap_servers
    props["offset.storage.topic"] = spec.kafka.offsets_topic
    props["security.protocol"] = spec.kafka.security_protocol
    if spec.kafka.security is not None:
        for key in spec.kafka.security.properties:
            props[key] = _file_ref("kafka", key)
    for key, value in sorted(spec.kafka.producer.items()):
        props[f"producer.{key}"] = value
    # With a backfill engine the initial snapshot is the backfill's job: the workers stream only
    # (a VStream copy as well would read every table twice).
    initial_by_backfill = spec.snapshot.mode is SnapshotMode.INITIAL and spec.snapshot.backfill is not None
    props["snapshot.mode"] = "never" if initial_by_backfill else spec.snapshot.mode
    if initial_by_backfill:
        # A first start holds every table back for that run (no live change before the snapshot).
        props[INITIAL_RUN_PROPERTY] = backfill_run_id(cr, INITIAL_BACKFILL)
    props["shardcdc.metrics.port"] = str(spec.worker.metrics_port)
    address = worker_metrics_address()
    if address:  # the chart's workers.listenAddress; unset, the worker's default (every interface)
        props["shardcdc.metrics.address"] = address
    # user-supplied Debezium properties; the CRD rejects the keys set above
    for key, value in sorted(spec.config.items()):
        props.setdefault(key, value)
    if spec.snapshot.backfill is not None:
        # execute-snapshot signals go to the backfill engine through the operator (docs/backfill.md)
        props.setdefault("shardcdc.signal.snapshot.engine", "backfill")
    return props


_KEY_ESCAPES = str.maketrans({"\\": "\\\\", " ": "\\ ", ":": "\\:", "=": "\\=", "#": "\\#", "!": "\\!",
                              "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"})
_VALUE_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"})


def _escape_value(value: str) -> str:
    out = value.translate(_VALUE_ESCAPES)
    # Leading blanks would be eaten by the properties parser.
    return "\\" + out if out[:1] == " " else out


def render_properties(props: Mapping[str, str], header: Iterable[str] = ()) -> str:
    """A ``.properties`` file: ``key=value`` lines in the given order, escaped as java.util.Properties reads them."""
    lines = [f"# {h}" for h in header]
    lines.extend(f"{k.translate(_KEY_ESCAPES)}={_escape_value(v)}" for k, v in props.items())
    return "\n".join(lines) + "\n"


def _checksum(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- objects ------------------------------------------------------------------------------------------


def _meta(cr: ConnectorResource, task: TaskPlan, annotations: Mapping[str, str] | None = None) -> JsonObject:
    meta: JsonObject = {
        "name": naming.task_object_name(cr.name, task.generation, task.task_id),
        "namespace": cr.namespace,
        "labels": naming.task_labels(cr.name, task.generation, task.task_id),
        "ownerReferences": [owner_reference(cr)],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def build_config_map(cr: ConnectorResource, generation: int) -> JsonObject:
    """The generation's ConfigMap holding ``worker.properties`` (what its tasks share), with the
    content's checksum as annotation."""
    text = render_properties(
        shared_properties(cr),
        header=(
            f"CdcConnector {cr.namespace}/{cr.name}: generation {generation}; each task's identity (its id, "
            "shards, generation) is in its pod's SHARDCDC_* environment.",
            "Written by the shardcdc operator; edits are overwritten.",
        ),
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": naming.generation_config_name(cr.name, generation),
            "namespace": cr.namespace,
            "labels": naming.generation_object_labels(cr.name, generation),
            "ownerReferences": [owner_reference(cr)],
            "annotations": {naming.CONFIG_CHECKSUM_ANNOTATION: _checksum(text)},
        },
        "data": {CONFIG_KEY: text},
    }


def _projected_sources(cr: ConnectorResource, name: str) -> list[JsonObject]:
    """The config file plus every referenced Secret key, in one read-only projected volume."""
    vt = cr.spec.source
    sources: list[JsonObject] = [{"configMap": {"name": name, "items": [{"key": CONFIG_KEY, "path": CONFIG_KEY}]}}]

    def secret(secret_name: str, volume: str, keys: Iterable[str]) -> None:
        items = [{"key": k, "path": f"secrets/{volume}/{k}"} for k in dict.fromkeys(keys)]
        sources.append({"secret": {"name": secret_name, "items": items}})

    if vt.credentials is not None:
        secret(vt.credentials.name, "vitess-credentials", (vt.credentials.username_key, vt.credentials.password_key))
    if vt.tls.enabled and vt.tls.ca_secret_ref is not None:
        secret(vt.tls.ca_secret_ref.name, "vitess-ca", (vt.tls.ca_secret_ref.key,))
    if vt.tls.enabled and vt.tls.client_cert_secret_ref is not None:
        secret(vt.tls.client_cert_secret_ref, "vitess-client-cert", ("tls.crt", "tls.key"))
    if cr.spec.kafka.security is not None and cr.spec.kafka.security.properties:
        secret(cr.spec.kafka.security.name, "kafka", cr.spec.kafka.security.properties)
    return sources


def _pod_security_context(cr: ConnectorResource) -> JsonObject:
    ctx: JsonObject = {
        "runAsNonRoot": True,
        "runAsUser": WORKER_UID,
        "runAsGroup": WORKER_UID,
        "fsGroup": WORKER_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    override = cr.spec.worker.pod_template.security_context
    if override:
        ctx.update(override)
        # runAsNonRoot is not negotiable: the worker never needs root.
        ctx["runAsNonRoot"] = True
    return ctx


def _worker_container(cr: ConnectorResource, task: TaskPlan) -> JsonObject:
    """The worker container: its command, environment, probes and a non-root, read-only root FS."""
    worker = cr.spec.worker
    port = worker.metrics_port

    def probe(path: str, period: int, failures: int) -> JsonObject:
        return {
            "httpGet": {"path": path, "port": "metrics"},
            "periodSeconds": period,
            "timeoutSeconds": 3,
            "failureThreshold": failures,
        }

    container: JsonObject = {
        "name": CONTAINER_NAME,
        "image": worker.image,
        "imagePullPolicy": worker.image_pull_policy,
        "command": ["shardcdc", "worker", "--config", CONFIG_FILE],
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            # For shardcdc.metrics.address=${env:POD_IP}: the endpoint on the pod's address only.
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "TMPDIR", "value": "/tmp"},
            # The Deployment restarts a worker that exits: one whose work is done waits instead.
            {"name": exitcodes.SUPERVISED_ENV, "value": "1"},
            # Whether this task stored positions before (cdcoperator.offsetslost): no restart to set it.
            expected_env_var(cr.name, task.generation, task.task_id),
            # The task's identity, layered over the generation's shared file.
            *({"name": property_to_env(k), "value": v} for k, v in task_identity(task).items()),
        ],
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
        "resources": dict(worker.resources) if worker.resources else DEFAULT_RESOURCES,
        # Startup may include connecting to VTGate and Kafka; the startup probe shields liveness from it.
        "startupProbe": probe("/healthz", 2, 60),
        "livenessProbe": probe("/healthz", 10, 3),
        "readinessProbe": probe("/readyz", 5, 2),
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return container


def build_deployment(cr: ConnectorResource, task: TaskPlan, config_map: JsonMapping) -> JsonObject:
    """The task's Deployment (``config_map``: its generation's): one replica (zero when not running), ``Recreate``, non-root, read-only root FS."""
    worker = cr.spec.worker
    tpl = worker.pod_template
    labels = naming.task_labels(cr.name, task.generation, task.task_id)
    checksum = config_map["metadata"]["annotations"][naming.CONFIG_CHECKSUM_ANNOTATION]
    pod_labels = {**tpl.labels, **labels}  # ours win: the selector depends on them
    pod_annotations = {**tpl.annotations, naming.CONFIG_CHECKSUM_ANNOTATION: checksum}

    container = _worker_container(cr, task)
    pod_spec: JsonObject = {
        "automountServiceAccountToken": False,  # workers never talk to the API server
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": _pod_security_context(cr),
        "containers": [container],
        "volumes": [
            {
                "name": "config",
                "projected": {"defaultMode": 0o440, "sources": _projected_sources(cr, config_map["metadata"]["name"])},
            },
            {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        ],
    }
    if tpl.service_account_name:
        pod_spec["serviceAccountName"] = tpl.service_account_name
    if tpl.priority_class_name:
        pod_spec["priorityClassName"] = tpl.priority_class_name
    if tpl.node_selector:
        pod_spec["nodeSelector"] = dict(tpl.node_selector)
    if tpl.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in tpl.tolerations]
    if tpl.affinity:
        pod_spec["affinity"] = dict(tpl.affinity)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(cr, task, {naming.CONFIG_CHECKSUM_ANNOTATION: checksum}),
        "spec": {
            "replicas": 1 if task.run else 0,
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": pod_labels, "annotations": pod_annotations},
                "spec": pod_spec,
            },
        },
    }


