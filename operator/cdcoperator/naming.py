"""Deterministic names and labels of the objects the operator owns.

Labels are API: users select on them (``kubectl get pods -l shardcdc.io/connector=orders``) and the
scale subresource's ``status.selector`` is built from them, so changing one is a breaking change.
"""

from __future__ import annotations

import hashlib
import json
import re

from cdcworker.jsontypes import JsonMapping
from cdcworker.textcut import quote

__all__ = [
    "CONFIG_CHECKSUM_ANNOTATION",
    "FINALIZER",
    "LABEL_COMPONENT",
    "LABEL_CONNECTOR",
    "LABEL_GENERATION",
    "LABEL_INSTANCE",
    "LABEL_MANAGED_BY",
    "LABEL_NAME",
    "LABEL_TASK",
    "MANAGED_BY",
    "MAX_NAME_LENGTH",
    "RESTART_ANNOTATION",
    "generation_config_name",
    "generation_labels",
    "generation_object_labels",
    "metadata_name_problems",
    "selector",
    "selector_labels",
    "task_labels",
    "task_object_name",
]

PREFIX = "shardcdc.io"
LABEL_CONNECTOR = f"{PREFIX}/connector"
LABEL_GENERATION = f"{PREFIX}/generation"
LABEL_TASK = f"{PREFIX}/task"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "shardcdc-operator"
CONFIG_CHECKSUM_ANNOTATION = f"{PREFIX}/config-checksum"
RESTART_ANNOTATION = f"{PREFIX}/restart"
FINALIZER = f"{PREFIX}/finalizer"

# A DNS label (pod host names, label values); names longer than this are shortened with a hash.
MAX_NAME_LENGTH = 63


# Kubernetes' own rules for object names (apimachinery's IsDNS1123Subdomain / IsDNS1123Label), with
# its wording. Local mode makes directories of them, so they also keep paths inside --state-dir.
_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
_RULES = {
    # field: (regex, max length, what Kubernetes says)
    "name": (_SUBDOMAIN, 253, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
             "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
             f"for validation is '{_SUBDOMAIN}')"),
    "namespace": (_LABEL, 63, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
                  "'-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
                  f"regex used for validation is '{_LABEL}')"),
}


def metadata_name_problems(metadata: JsonMapping) -> list[str]:
    """What the API server says of ``metadata.name`` and ``metadata.namespace`` (absent: fine here;
    a required name is the caller's rule)."""
    problems = []
    for field, (regex, limit, rule) in _RULES.items():
        value = metadata.get(field)
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            problems.append(f"metadata.{field}: Invalid value: {json.dumps(type(value).__name__)}: must be a string")
            continue
        shown = quote(value, render=json.dumps)
        if len(value) > limit:
            problems.append(f"metadata.{field}: Invalid value: {shown}: must be no more than {limit} characters")
        if not re.fullmatch(regex, value):
            problems.append(f"metadata.{field}: Invalid value: {shown}: {rule}")
    return problems


def _suffixed(connector: str, suffix: str) -> str:
    """``<connector><suffix>``; the CRD limits connector names so this always fits, and a longer
    name (local mode, no CRD) keeps the suffix and replaces the end of the connector name by a
    short hash, still deterministic."""
    name = connector + suffix
    if len(name) <= MAX_NAME_LENGTH:
        return name
    digest = hashlib.sha256(connector.encode()).hexdigest()[:8]
    keep = MAX_NAME_LENGTH - len(suffix) - len(digest) - 1
    return f"{connector[:keep].rstrip('-.')}-{digest}{suffix}"


def task_object_name(connector: str, generation: int, task_id: int) -> str:
    """``<connector>-g<gen>-t<id>``: the Deployment of one task of one generation."""
    return _suffixed(connector, f"-g{generation}-t{task_id}")


def generation_config_name(connector: str, generation: int) -> str:
    """``<connector>-g<gen>-workers``: the ConfigMap every task of one generation mounts. Not
    ``-config``: a backfill's ConfigMaps end in ``-config`` and ``-templates``
    (``<connector>-bf-<id>-config``), and connector ``x-bf-y`` at generation 0 would then share a
    name with connector ``x``'s backfill ``y-g0``."""
    return _suffixed(connector, f"-g{generation}-workers")


def selector_labels(connector: str) -> dict[str, str]:
    """Labels every worker pod of a connector carries, whatever its generation."""
    return {LABEL_CONNECTOR: connector}


def selector(connector: str) -> str:
    """``status.selector`` (the scale subresource's label selector) in string form."""
    return ",".join(f"{k}={v}" for k, v in selector_labels(connector).items())


def generation_labels(connector: str, generation: int) -> dict[str, str]:
    """Labels every object of one generation of a connector carries (a label selector for all of them)."""
    return {**selector_labels(connector), LABEL_GENERATION: str(generation)}


def generation_object_labels(connector: str, generation: int) -> dict[str, str]:
    """The full label set of an object of a whole generation (its ConfigMap)."""
    return {
        LABEL_NAME: "shardcdc-worker",
        LABEL_INSTANCE: connector,
        LABEL_COMPONENT: "worker",
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_CONNECTOR: connector,
        LABEL_GENERATION: str(generation),
    }


def task_labels(connector: str, generation: int, task_id: int) -> dict[str, str]:
    """The full label set of one task's objects (also the Deployment's pod selector)."""
    return {**generation_object_labels(connector, generation), LABEL_TASK: str(task_id)}
