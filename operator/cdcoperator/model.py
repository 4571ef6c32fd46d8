"""Typed, frozen view of a CdcConnector resource, parsed from the dict the API server returns.

The CRD's schema and CEL rules already reject malformed resources, so parsing here only fills in
defaults and raises ``SpecError`` for the few things a schema cannot express (or a resource that
reached us without the CRD, e.g. in local mode). Defaults live here once; the CRD documents them.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cdcworker.config.model import SnapshotMode
from cdcworker.jsontypes import JsonMapping
from cdcworker.keyrange import parse_shard

__all__ = [
    "API_VERSION",
    "DEFAULT_IMAGE",
    "GROUP",
    "KIND",
    "VERSION",
    "WORKER_IMAGE_ENV",
    "WORKER_METRICS_ADDRESS_ENV",
    "BackfillEngine",
    "BackfillRequest",
    "BackfillSpec",
    "ConnectorResource",
    "ConnectorSpec",
    "CredentialsRef",
    "DeletionPolicy",
    "KafkaSecurityRef",
    "KafkaSpec",
    "PodTemplateOverrides",
    "SecretKeyRef",
    "SnapshotSpec",
    "SpecError",
    "State",
    "TlsSpec",
    "VitessSource",
    "WorkerSpec",
    "default_worker_image",
    "worker_metrics_address",
]

GROUP = "shardcdc.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "CdcConnector"
DEFAULT_IMAGE = "ghcr.io/shardcdc/shardcdc:0.1.0"
# The operator's environment overrides DEFAULT_IMAGE (the Helm chart sets it from workerImage).
WORKER_IMAGE_ENV = "SHARDCDC_WORKER_IMAGE"
DEFAULT_METRICS_PORT = 8080


def default_worker_image() -> str:
    """The image of workers whose connector sets no ``spec.worker.image``: ``$SHARDCDC_WORKER_IMAGE`` or ours.

    Read at every parse, not at import, so the operator's environment is the only input.
    """
    return os.environ.get(WORKER_IMAGE_ENV, "").strip() or DEFAULT_IMAGE


# The chart's workers.listenAddress (the workers' shardcdc.metrics.address); unset: the worker's default.
WORKER_METRICS_ADDRESS_ENV = "SHARDCDC_WORKER_METRICS_ADDRESS"


def worker_metrics_address() -> str | None:
    """The listen address of every worker's metrics, health and status endpoint, if the installer set one."""
    return os.environ.get(WORKER_METRICS_ADDRESS_ENV, "").strip() or None


class SpecError(ValueError):
    """The resource cannot be turned into a connector spec (the message names the field)."""


class State(enum.StrEnum):
    """``spec.state``: what the workers should be doing."""

    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"


class DeletionPolicy(enum.StrEnum):
    RETAIN = "Retain"
    DELETE_OFFSETS = "DeleteOffsets"


class BackfillEngine(enum.StrEnum):
    SPARK_OPERATOR = "sparkOperator"
    SPARK_SUBMIT = "sparkSubmit"
    LOCAL = "local"


@dataclass(frozen=True, slots=True)
class SecretKeyRef:
    """One key of a Secret in the connector's namespace."""

    name: str
    key: str


@dataclass(frozen=True, slots=True)
class CredentialsRef:
    """A Secret holding the VTGate user and password (kubernetes.io/basic-auth key names by default)."""

    name: str
    username_key: str = "username"
    password_key: str = "password"


@dataclass(frozen=True, slots=True)
class TlsSpec:
    enabled: bool = False
    ca_secret_ref: SecretKeyRef | None = None
    client_cert_secret_ref: str | None = None  # a kubernetes.io/tls Secret: tls.crt and tls.key
    server_name: str | None = None


@dataclass(frozen=True, slots=True)
class VitessSource:
    vtgate: str  # host:port
    keyspace: str
    tablet_type: str = "PRIMARY"
    vtctld: str | None = None
    shards: tuple[str, ...] | None = None  # None: every serving shard
    tls: TlsSpec = field(default_factory=TlsSpec)
    credentials: CredentialsRef | None = None
    vtctld_tls: TlsSpec = field(default_factory=TlsSpec)  # vtctld's own TLS (discovery only); off: plaintext

    @property
    def vtgate_host(self) -> str:
        return self.vtgate.rsplit(":", 1)[0].strip("[]")

    @property
    def vtgate_port(self) -> int:
        return int(self.vtgate.rsplit(":", 1)[1])


@dataclass(frozen=True, slots=True)
class KafkaSecurityRef:
    """A Secret whose keys are Kafka client property names (``sasl.jaas.config`` ...), one file each."""

    name: str
    properties: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KafkaSpec:
    bootstrap_servers: str
    topic_prefix: str
    offsets_topic: str = "shardcdc-offsets"
    security_protocol: str = "PLAINTEXT"
    security: KafkaSecurityRef | None = None
    producer: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PodTemplateOverrides:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[JsonMapping, ...] = ()
    affinity: JsonMapping | None = None
    security_context: JsonMapping | None = None  # pod-level, merged over our non-root default
    service_account_name: str | None = None
    priority_class_name: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    image: str = DEFAULT_IMAGE
    image_pull_policy: str = "IfNotPresent"
    resources: JsonMapping | None = None
    metrics_port: int = DEFAULT_METRICS_PORT
    pod_template: PodTemplateOverrides = field(default_factory=PodTemplateOverrides)


@dataclass(frozen=True, slots=True)
class BackfillSpec:
    engine: BackfillEngine = BackfillEngine.LOCAL
    spark: JsonMapping = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SnapshotSpec:
    mode: SnapshotMode = SnapshotMode.INITIAL
    backfill: BackfillSpec | None = None


@dataclass(frozen=True, slots=True)
class BackfillRequest:
    id: str
    tables: tuple[str, ...]
    condition: str | None = None


@dataclass(frozen=True, slots=True)
class ConnectorSpec:
    source: VitessSource
    kafka: KafkaSpec
    tasks: int = 1
    state: State = State.RUNNING
    config: Mapping[str, str] = field(default_factory=dict)
    worker: WorkerSpec = field(default_factory=WorkerSpec)
    snapshot: SnapshotSpec = field(default_factory=SnapshotSpec)
    backfills: tuple[BackfillRequest, ...] = ()
    deletion_policy: DeletionPolicy = DeletionPolicy.RETAIN

    @classmethod
    def from_dict(cls, spec: JsonMapping) -> ConnectorSpec:
        return _parse_spec(spec)


@dataclass(frozen=True, slots=True)
class ConnectorResource:
    """The parts of a CdcConnector the operator uses: identity plus the parsed spec."""

    name: str
    namespace: str
    uid: str
    generation: int
    spec: ConnectorSpec

    @classmethod
    def from_body(cls, body: JsonMapping) -> ConnectorResource:
        meta = body.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError("metadata.name is required")
        return cls(
            name=name,
            namespace=str(meta.get("namespace") or "default"),
            uid=str(meta.get("uid") or ""),
            generation=int(meta.get("generation") or 0),
            spec=_parse_spec(body.get("spec") or {}),
        )


# --- parsing helpers ----------------------------------------------------------------------------------


def _obj(d: JsonMapping, key: str, where: str) -> JsonMapping:
    value = d.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}.{key} must be an object")
    return value


def _req_str(d: JsonMapping, key: str, where: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value:
        raise SpecError(f"{where}.{key} is required and must be a non-empty string")
    return value


def _opt_str(d: JsonMapping, key: str, where: str) -> str | None:
    value = d.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise SpecError(f"{where}.{key} must be a string")
    return value


def _str_map(d: JsonMapping, key: str, where: str) -> dict[str, str]:
    raw = _obj(d, key, where)
    out: dict[str, str] = {}
    for k, v in raw.items():
        if not isinstance(v, str):
            raise SpecError(f"{where}.{key}[{k!r}] must be a string")
        out[str(k)] = v
    return out


def _enum(kind: type[enum.StrEnum], value: Any, where: str, default: enum.StrEnum) -> Any:  # Any: a spec field (JSON), and the member of the enum class given
    if value is None:
        return default
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(m.value for m in kind)
        raise SpecError(f"{where} must be one of {allowed}, got {value!r}") from None


def _parse_source(spec: JsonMapping) -> VitessSource:
    source = _obj(spec, "source", "spec")
    vt = _obj(source, "vitess", "spec.source")
    where = "spec.source.vitess"
    if not vt:
        raise SpecError(f"{where} is required")
    vtgate = _req_str(vt, "vtgate", where)
    host, sep, port = vtgate.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SpecError(f"{where}.vtgate must be host:port, got {vtgate!r}")
    shards_raw = vt.get("shards")
    shards: tuple[str, ...] | None = None
    if shards_raw:
        shards = tuple(str(s) for s in shards_raw)
        bad = [s for s in shards if not _parses(s)]
        if bad:
            raise SpecError(f"{where}.shards has invalid shard names: {', '.join(bad)} (a shard is '0' or "
                            "'<start>-<end>' in hex with start below end, e.g. '-80', '80-c0')")
    tls = _tls(vt, "tls", where)
    cred_raw = _obj(vt, "credentialsSecretRef", where)
    credentials = (
        CredentialsRef(
            name=_req_str(cred_raw, "name", f"{where}.credentialsSecretRef"),
            username_key=str(cred_raw.get("usernameKey") or "username"),
            password_key=str(cred_raw.get("passwordKey") or "password"),
        )
        if cred_raw
        else None
    )
    return VitessSource(
        vtgate=vtgate,
        keyspace=_req_str(vt, "keyspace", where),
        tablet_type=str(vt.get("tabletType") or "PRIMARY"),
        vtctld=_opt_str(vt, "vtctld", where),
        shards=shards,
        tls=tls,
        credentials=credentials,
        vtctld_tls=_tls(vt, "vtctldTls", where),
    )


def _parses(shard: str) -> bool:
    """A well-formed name whose key range is not empty (``80-40`` matches the name pattern)."""
    try:
        parse_shard(shard)
    except ValueError:
        return False
    return True


def _tls(vt: JsonMapping, name: str, where: str) -> TlsSpec:
    raw = _obj(vt, name, where)
    at = f"{where}.{name}"
    ca = _obj(raw, "caSecretRef", at)
    return TlsSpec(
        enabled=bool(raw.get("enabled", False)),
        ca_secret_ref=SecretKeyRef(_req_str(ca, "name", f"{at}.caSecretRef"), str(ca.get("key") or "ca.crt"))
        if ca
        else None,
        client_cert_secret_ref=_opt_str(_obj(raw, "clientCertSecretRef", at), "name", where),
        server_name=_opt_str(raw, "serverName", at),
    )


def _parse_kafka(spec: JsonMapping) -> KafkaSpec:
    kafka = _obj(spec, "kafka", "spec")
    where = "spec.kafka"
    if not kafka:
        raise SpecError(f"{where} is required")
    sec_raw = _obj(kafka, "securitySecretRef", where)
    security = (
        KafkaSecurityRef(
            name=_req_str(sec_raw, "name", f"{where}.securitySecretRef"),
            properties=tuple(str(p) for p in sec_raw.get("properties") or ()),
        )
        if sec_raw
        else None
    )
    return KafkaSpec(
        bootstrap_servers=_req_str(kafka, "bootstrapServers", where),
        topic_prefix=_req_str(kafka, "topicPrefix", where),
        offsets_topic=str(kafka.get("offsetsTopic") or "shardcdc-offsets"),
        security_protocol=str(kafka.get("securityProtocol") or "PLAINTEXT"),
        security=security,
        producer=_str_map(kafka, "producer", where),
    )


def _parse_worker(spec: JsonMapping) -> WorkerSpec:
    worker = _obj(spec, "worker", "spec")
    where = "spec.worker"
    tpl = _obj(worker, "podTemplate", where)
    twhere = f"{where}.podTemplate"
    tolerations = tpl.get("tolerations") or ()
    overrides = PodTemplateOverrides(
        labels=_str_map(tpl, "labels", twhere),
        annotations=_str_map(tpl, "annotations", twhere),
        node_selector=_str_map(tpl, "nodeSelector", twhere),
        tolerations=tuple(dict(t) for t in tolerations),
        affinity=dict(_obj(tpl, "affinity", twhere)) or None,
        security_context=dict(_obj(tpl, "securityContext", twhere)) or None,
        service_account_name=_opt_str(tpl, "serviceAccountName", twhere),
        priority_class_name=_opt_str(tpl, "priorityClassName", twhere),
    )
    return WorkerSpec(
        image=str(worker.get("image") or default_worker_image()),
        image_pull_policy=str(worker.get("imagePullPolicy") or "IfNotPresent"),
        resources=dict(_obj(worker, "resources", where)) or None,
        metrics_port=int(worker.get("metricsPort") or DEFAULT_METRICS_PORT),
        pod_template=overrides,
    )


def _parse_snapshot(spec: JsonMapping) -> SnapshotSpec:
    snap = _obj(spec, "snapshot", "spec")
    bf = _obj(snap, "backfill", "spec.snapshot")
    backfill = (
        BackfillSpec(
            engine=_enum(BackfillEngine, bf.get("engine"), "spec.snapshot.backfill.engine", BackfillEngine.LOCAL),
            spark=dict(_obj(bf, "spark", "spec.snapshot.backfill")),
        )
        if bf
        else None
    )
    return SnapshotSpec(mode=_enum(SnapshotMode, snap.get("mode"), "spec.snapshot.mode", SnapshotMode.INITIAL),
                        backfill=backfill)


def _parse_spec(spec: JsonMapping) -> ConnectorSpec:
    tasks = spec.get("tasks", 1)
    if not isinstance(tasks, int) or isinstance(tasks, bool) or tasks < 1:
        raise SpecError(f"spec.tasks must be an integer >= 1, got {tasks!r}")
    backfills = tuple(
        BackfillRequest(
            id=_req_str(b, "id", f"spec.backfills[{i}]"),
            tables=tuple(str(t) for t in b.get("tables") or ()),
            condition=_opt_str(b, "condition", f"spec.backfills[{i}]"),
        )
        for i, b in enumerate(spec.get("backfills") or ())
    )
    return ConnectorSpec(
        source=_parse_source(spec),
        kafka=_parse_kafka(spec),
        tasks=tasks,
        state=_enum(State, spec.get("state"), "spec.state", State.RUNNING),
        config=_str_map(spec, "config", "spec"),
        worker=_parse_worker(spec),
        snapshot=_parse_snapshot(spec),
        backfills=backfills,
        deletion_policy=_enum(DeletionPolicy, spec.get("deletionPolicy"), "spec.deletionPolicy", DeletionPolicy.RETAIN),
    )
