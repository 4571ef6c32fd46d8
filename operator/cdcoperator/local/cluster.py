"""The API server of local mode: connectors, Deployments and ConfigMaps in memory, status on disk.

``LocalCluster`` offers the calls ``reconcile()`` makes on the API server (:class:`ClusterApi`),
with the same semantics where reconcile depends on them: manifests are validated against the
CRD's schema and CEL rules (``cdcoperator.validation``), ``metadata.generation`` counts spec
changes, children are created or merge-patched by their applied hash (so an unchanged plan
writes nothing), status is a merge patch, a one-shot annotation is removed only if it still has
the value acted on. ConfigMaps and Deployments live in memory only: a restarted ``shardcdc run``
recreates them from ``status.assignment``, which is saved after every change (with the rest of
the connector) to ``<state dir>/<namespace>/<name>/connector.json``.

Secrets come from a directory laid out as Kubernetes mounts them: ``<secrets dir>/<secret>/<key>``.
"""

from __future__ import annotations

import copy
import json
import os
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, DEPLOYMENTS, KINDS, Kind, is_applied, prepare_apply
from cdcoperator.model import API_VERSION, KIND, ConnectorResource, SpecError
from cdcoperator.naming import metadata_name_problems
from cdcoperator.validation import validate_or_raise
from cdcworker.jsontypes import JsonMapping, JsonObject

__all__ = ["GENERATION_RECORD", "LocalCluster", "apply_merge_patch", "clear_saved_generation_record", "connector_dir"]

STATE_FILE = "connector.json"
# The status fields that record the connector's generations (cleared by an offsets reset).
GENERATION_RECORD = ("assignment", "adoptedOffsets")


def apply_merge_patch(target: JsonObject, patch: JsonMapping) -> JsonObject:
    """Apply a JSON merge patch (RFC 7386) to ``target`` in place; returns it."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            # RFC 7386: a patch object applies to the target's object, or to an empty one.
            target[key] = apply_merge_patch(target[key] if isinstance(target.get(key), dict) else {}, value)
        else:
            target[key] = copy.deepcopy(value)
    return target


def connector_dir(state_dir: Path, namespace: str, name: str) -> Path:
    """``<state_dir>/<namespace>/<name>``; ``SpecError`` for names Kubernetes would refuse, which
    could also lead out of the state directory (``..``, ``/``): the last guard before files are
    written there, whatever checked the manifest before."""
    problems = metadata_name_problems({"name": name, "namespace": namespace})
    if problems or not name or not namespace:
        raise SpecError("; ".join(problems) or "metadata.name and metadata.namespace must not be empty")
    return Path(state_dir) / namespace / name


def clear_saved_generation_record(state_dir: Path, namespace: str, name: str) -> bool:
    """``LocalCluster.clear_generation_record`` for a connector no instance runs: its saved state
    file; False when there is none."""
    path = connector_dir(state_dir, namespace, name) / STATE_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return False
    status = doc.get("status") or {}
    for key in GENERATION_RECORD:
        status.pop(key, None)
    doc["status"] = status
    _write_json(path, doc)
    return True


def _write_json(path: Path, doc: JsonMapping, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.chmod(mode)
    os.replace(tmp, path)


class LocalCluster:
    """In-memory objects of one local-mode instance; thread-safe (the kubelet reads Deployments)."""

    # The backfill reconcile creates Jobs for the ``local`` engine here: local mode runs them
    # (``local.jobs.ProcessJobs``); on Kubernetes that engine creates nothing.
    runs_local_jobs = True

    def __init__(self, state_dir: Path, secrets_dir: Path | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.secrets_dir = Path(secrets_dir) if secrets_dir is not None else None
        self._lock = threading.Lock()
        self._connectors: dict[tuple[str, str], JsonObject] = {}
        self._objects: dict[tuple[str, str, str], JsonObject] = {}  # (plural, namespace, name)
        self._version = 0

    # --- connectors (local operations: what kubectl apply/patch do) ------------------------------------

    def put_connector(self, body: JsonMapping) -> JsonObject:
        """Create the connector, or replace its spec, labels and annotations (``kubectl apply``).

        A saved connector of the same name keeps its uid, generation and status, so a restarted
        ``shardcdc run`` continues the generation it left.
        """
        if body.get("kind", KIND) != KIND:
            raise SpecError(f"expected kind {KIND}, got {body.get('kind')!r}")
        meta = body.get("metadata") or {}
        name = str(meta.get("name") or "")
        namespace = str(meta.get("namespace") or "default")
        if not name:
            raise SpecError("metadata.name is required")
        checked = {**body, "metadata": {**meta, "name": name, "namespace": namespace}}
        if metadata_name_problems(checked["metadata"]):
            validate_or_raise(checked)  # the API server's answer, before a path is made of the names
        with self._lock:
            current = self._connectors.get((namespace, name)) or self._load(namespace, name)
            # What the API server would say: the CRD's schema and CEL rules (transition rules
            # against the saved connector), then what the model itself needs.
            validate_or_raise(checked, current if current is not None and current.get("spec") else None)
            ConnectorResource.from_body({**body, "metadata": {**meta, "namespace": namespace}})
            if current is None:
                current = {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "generation": 0},
                    "spec": {},
                    "status": {},
                }
            new = copy.deepcopy(current)
            new["metadata"]["labels"] = dict(meta.get("labels") or {})
            new["metadata"]["annotations"] = dict(meta.get("annotations") or {})
            new["spec"] = copy.deepcopy(dict(body.get("spec") or {}))
            self._store(current, new)
            return copy.deepcopy(new)

    def patch_connector(self, namespace: str, name: str, patch: JsonMapping) -> JsonObject:
        """Merge-patch ``spec`` and ``metadata.labels/annotations`` (``kubectl patch --type=merge``)."""
        unknown = set(patch) - {"spec", "metadata"}
        unknown |= {f"metadata.{k}" for k in (patch.get("metadata") or {}) if k not in ("labels", "annotations")}
        if unknown:
            raise SpecError(f"only spec and metadata.labels/annotations can be patched, not {', '.join(sorted(unknown))}")
        with self._lock:
            current = self._connectors.get((namespace, name))
            if current is None:
                raise KeyError(f"cdcconnector {namespace}/{name} not found")
            new = apply_merge_patch(copy.deepcopy(current), patch)
            validate_or_raise(new, current)
            ConnectorResource.from_body(new)
            self._store(current, new)
            return copy.deepcopy(new)

    def clear_generation_record(self, namespace: str, name: str, status: JsonMapping) -> JsonObject:
        """Merge ``status`` (``cdcoperator.offsets.RESET_STATUS``: only nulls of the generation
        record) into the connector's status, after an offsets reset; ``shardcdc offsets`` asks for it."""
        if any(v is not None for v in status.values()) or not set(status) <= set(GENERATION_RECORD):
            raise SpecError(f"only {', '.join(GENERATION_RECORD)} can be cleared from the status")
        with self._lock:
            current = self._connectors.get((namespace, name))
            if current is None:
                raise KeyError(f"cdcconnector {namespace}/{name} not found")
            new = copy.deepcopy(current)
            new["status"] = apply_merge_patch(new.get("status") or {}, status)
            self._store(current, new)
            return copy.deepcopy(new)

    def connector(self, namespace: str, name: str) -> JsonObject | None:
        with self._lock:
            body = self._connectors.get((namespace, name))
            return copy.deepcopy(body) if body is not None else None

    def _store(self, current: JsonMapping, new: JsonObject) -> None:
        meta = new["metadata"]
        if new.get("spec") != current.get("spec"):
            meta["generation"] = int(current["metadata"].get("generation") or 0) + 1
        self._version += 1
        meta["resourceVersion"] = str(self._version)
        self._connectors[(meta["namespace"], meta["name"])] = new
        _write_json(connector_dir(self.state_dir, meta["namespace"], meta["name"]) / STATE_FILE, new)

    def _load(self, namespace: str, name: str) -> JsonObject | None:
        path = connector_dir(self.state_dir, namespace, name) / STATE_FILE
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        return doc if isinstance(doc, dict) else None

    # --- what reconcile() calls (the API server's part of ClusterApi) -------------------------------

    async def get_connector(self, namespace: str, name: str) -> JsonObject | None:
        return self.connector(namespace, name)

    async def patch_connector_status(self, namespace: str, name: str, status: JsonMapping) -> None:
        with self._lock:
            current = self._connectors.get((namespace, name))
            if current is None:
                return
            new = copy.deepcopy(current)
            new["status"] = apply_merge_patch(new.get("status") or {}, status)
            self._store(current, new)

    async def remove_annotation(self, namespace: str, name: str, key: str, expected: str) -> None:
        with self._lock:
            current = self._connectors.get((namespace, name))
            if current is None or (current["metadata"].get("annotations") or {}).get(key) != expected:
                return
            new = copy.deepcopy(current)
            del new["metadata"]["annotations"][key]
            self._store(current, new)

    async def list_children(self, kind: Kind, namespace: str, connector: str,
                            metadata_only: bool = False) -> list[JsonObject]:
        return self.children(kind, namespace, connector)  # whole objects: metadata included

    def children(self, kind: Kind, namespace: str | None = None, connector: str | None = None) -> list[JsonObject]:
        with self._lock:
            out = []
            for (plural, ns, _), obj in sorted(self._objects.items()):
                labels = obj["metadata"].get("labels") or {}
                if plural == kind.plural and namespace in (None, ns) and (
                        connector is None or labels.get(naming.LABEL_CONNECTOR) == connector):
                    out.append(copy.deepcopy(obj))
            return out

    async def apply(self, obj: JsonMapping, live: JsonMapping | None) -> str:
        kind = KINDS[obj["kind"]]
        meta = obj["metadata"]
        key = (kind.plural, meta["namespace"], meta["name"])
        with self._lock:
            current = self._objects.get(key)
            desired, patch, digest = prepare_apply(obj, current)
            if current is None:
                self._version += 1
                desired["metadata"]["resourceVersion"] = str(self._version)
                self._objects[key] = desired
                return "created"
            if is_applied(current, obj, digest):
                return "unchanged"
            apply_merge_patch(current, patch)
            self._version += 1
            current["metadata"]["resourceVersion"] = str(self._version)
            return "patched"

    async def set_replicas(self, namespace: str, name: str, replicas: int) -> None:
        with self._lock:
            dep = self._objects.get((DEPLOYMENTS.plural, namespace, name))
            if dep is not None:
                dep["spec"]["replicas"] = replicas

    async def annotate_pod_template(self, namespace: str, name: str, key: str, value: str) -> None:
        with self._lock:
            dep = self._objects.get((DEPLOYMENTS.plural, namespace, name))
            if dep is not None:
                dep["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[key] = value

    async def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        with self._lock:
            return self._objects.pop((kind.plural, namespace, name), None) is not None

    async def delete_generation(self, kind: Kind, namespace: str, connector: str, generation: int,
                                tasks: Sequence[int] = ()) -> list[str]:
        wanted = naming.generation_labels(connector, generation).items()
        with self._lock:
            keys = [key for key, obj in sorted(self._objects.items()) if key[:2] == (kind.plural, namespace)
                    and wanted <= (obj["metadata"].get("labels") or {}).items()]
            for key in keys:
                del self._objects[key]
            return [name for _, _, name in keys]

    async def list_labelled(self, kind: Kind, namespace: str, selector: str) -> list[JsonObject]:
        """Equality selectors only (``k=v,k2=v2``), which is all the backfill code sends."""
        wanted = dict(part.split("=", 1) for part in selector.split(",") if part)
        with self._lock:
            return [copy.deepcopy(obj) for (plural, ns, _), obj in sorted(self._objects.items())
                    if plural == kind.plural and ns == namespace
                    and wanted.items() <= (obj["metadata"].get("labels") or {}).items()]

    async def create(self, kind: Kind, obj: JsonMapping) -> JsonObject | None:
        meta = obj["metadata"]
        key = (kind.plural, meta["namespace"], meta["name"])
        with self._lock:
            if key in self._objects:
                return None
            self._version += 1
            made = copy.deepcopy(dict(obj))
            made["metadata"]["resourceVersion"] = str(self._version)
            self._objects[key] = made
            return copy.deepcopy(made)

    def put(self, kind: Kind, obj: JsonMapping) -> None:
        """Create or replace an object (local mode's own controllers: a running backfill job's pod)."""
        meta = obj["metadata"]
        with self._lock:
            self._version += 1
            made = copy.deepcopy(dict(obj))
            made["metadata"]["resourceVersion"] = str(self._version)
            self._objects[(kind.plural, meta["namespace"], meta["name"])] = made

    def remove(self, kind: Kind, namespace: str, name: str) -> None:
        with self._lock:
            self._objects.pop((kind.plural, namespace, name), None)

    def set_status(self, kind: Kind, namespace: str, name: str, status: JsonMapping) -> None:
        """Merge-patch an object's status (local mode's Job controller)."""
        with self._lock:
            obj = self._objects.get((kind.plural, namespace, name))
            if obj is None:
                return
            obj["status"] = apply_merge_patch(obj.get("status") or {}, status)
            self._version += 1
            obj["metadata"]["resourceVersion"] = str(self._version)

    # --- for the kubelet ------------------------------------------------------------------------------

    def deployments(self) -> list[JsonObject]:
        return self.children(DEPLOYMENTS)

    async def read_secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        return self.resolve("Secret", namespace, name)

    def resolve(self, kind: str, namespace: str, name: str) -> dict[str, bytes] | None:
        """Data of a ConfigMap (from memory) or a Secret (files under the secrets directory)."""
        if kind == "ConfigMap":
            with self._lock:
                cm = self._objects.get((CONFIG_MAPS.plural, namespace, name))
                if cm is None:
                    return None
                return {k: str(v).encode() for k, v in (cm.get("data") or {}).items()}
        if kind == "Secret" and self.secrets_dir is not None:
            folder = self.secrets_dir / name
            if not folder.is_dir():
                return None
            return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}
        return None
