"""One CdcConnector judged as the operator would run it: the CRD's schema and CEL rules, the spec as
the operator parses it, no operator-owned keys in ``spec.config``, and the worker configuration the
operator would write for a task validated with the worker's checks.

Shared by ``shardcdc validate``, ``shardcdc run`` (local mode refuses what validate refuses) and the
admission webhook; it lives in the operator because it needs the operator's model and objects, and
the CLI sits above the operator. Secret references become placeholders: Secrets are the cluster's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cdcoperator.model import API_VERSION, ConnectorResource, SpecError
from cdcoperator.objects import worker_properties
from cdcoperator.planner import TaskPlan
from cdcoperator.validation import validate as validate_against_crd
from cdcworker.config import ConfigError, operator_owned, validate
from cdcworker.config.kafkaclient import client_key
from cdcworker.config.loader import load_raw
from cdcworker.jsontypes import JsonMapping, JsonValue
from cdcworker.textcut import quote

__all__ = ["PLACEHOLDER_SECRET", "connector_documents", "connector_label", "validate_connector"]

PLACEHOLDER_SECRET = "placeholder-secret"


# A Secret's value stands in with the shape its property needs (the worker translates a JAAS line).
_SHAPED_PLACEHOLDERS = {
    "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                        f'username="placeholder" password="{PLACEHOLDER_SECRET}";',
}


def _placeholders(props: Mapping[str, str]) -> dict[str, str]:
    return {k: (_SHAPED_PLACEHOLDERS.get(client_key(k), PLACEHOLDER_SECRET) if v.startswith("${file:") else v)
            for k, v in props.items()}


def validate_connector(body: JsonMapping) -> list[str]:
    """Problems of one CdcConnector ([] when valid): spec, owned keys, the generated worker config."""
    problems: list[str] = []
    if body.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: expected {API_VERSION} (the CRD's version), got "
                        f"{quote(body.get('apiVersion'))}")
    # The CRD's own schema and CEL rules first, with the API server's wording (what kubectl apply says).
    crd_errors = validate_against_crd(body)
    problems.extend(crd_errors)
    if crd_errors and not (isinstance(body.get("metadata"), Mapping) and isinstance(body.get("spec"), Mapping)):
        return problems  # no object to read further
    try:
        cr = ConnectorResource.from_body({**body, "metadata": {"uid": "validate", **(body.get("metadata") or {})}})
    except SpecError as exc:
        return problems if crd_errors else [*problems, str(exc)]  # the CRD's message already says it
    owned = set(operator_owned()) | {"name", "topic.prefix", "tasks.max", "snapshot.mode", "bootstrap.servers",
                                     "offset.storage.topic", "security.protocol"}
    for key in sorted(cr.spec.config):
        if crd_errors:
            break  # the CRD's CEL rules already named the operator-owned keys
        if key in owned or key.startswith("vitess.offset.storage."):
            problems.append(f"spec.config[{key!r}]: set by the operator; use the CdcConnector's own fields instead")
    shards = cr.spec.source.shards or ("-",)
    # Generation bookkeeping is the operator's, not the user's: judge the user's settings in a
    # steady-state generation (1, after one task), whatever generation the connector will be in.
    task = TaskPlan(generation=1, task_id=0, task_count=1, prev_task_count=1, shards=tuple(shards), run=True)
    props = _placeholders(worker_properties(cr, task))
    try:
        validate(load_raw([], env={}, overrides=props))
    except ConfigError as exc:
        problems.extend(f"spec.config: {m}" if m.split(":", 1)[0] in cr.spec.config else m for m in exc.messages)
    return problems


def connector_documents(docs: Sequence[JsonValue]) -> list[tuple[int, JsonMapping]]:
    """(index, document) of the CdcConnectors among a file's documents; other objects of a bundle
    (Namespaces, Secrets, Applications) are not ours to judge."""
    return [(i, d) for i, d in enumerate(docs) if isinstance(d, Mapping) and d.get("kind") == "CdcConnector"]


def connector_label(doc: JsonMapping, index: int) -> str:
    """The name to call a connector document by in messages (``#<index>`` when it has none)."""
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return quote(name, render=str) if isinstance(name, str) and name else f"#{index}"
