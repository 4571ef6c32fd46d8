"""``shardcdc validate -f FILE``: check a connector before deploying it, with the worker's own checks.

* a worker ``.properties`` file: loaded and validated exactly as ``shardcdc worker`` does at start
  (environment variables are ignored, so the file alone is judged);
* a CdcConnector YAML (several documents allowed; other kinds are skipped): the spec is parsed as the operator parses it,
  ``spec.config`` may not set keys the operator owns (the CRD's CEL rules reject them too), and the
  worker configuration the operator would write for a task is validated with the worker's checks.
  Secret references become placeholders: Secrets are the cluster's, not checked here.

Exit codes: 0 valid, 1 invalid (every problem is listed), 2 the file cannot be read.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape

from cdcworker.admin.manifest import ManifestError, load_documents
from cdcworker.textcut import quote

__all__ = ["connector_documents", "connector_label", "register", "validate_connector", "validate_properties"]

PLACEHOLDER_SECRET = "placeholder-secret"


def register(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    parser.add_argument("-f", "--file", action="append", required=True,
                        help="a CdcConnector YAML or a worker .properties file (repeatable)")
    return run


def validate_properties(path: str) -> list[str]:
    """Problems of a worker properties file ([] when valid)."""
    from cdcworker.config import ConfigError, load_config

    try:
        load_config([path], env={})
    except ConfigError as exc:
        return exc.messages
    return []


# A Secret's value stands in with the shape its property needs (the worker translates a JAAS line).
_SHAPED_PLACEHOLDERS = {
    "sasl.jaas.config": f'org.apache.kafka.common.security.plain.PlainLoginModule required '
                        f'username="placeholder" password="{PLACEHOLDER_SECRET}";',
}


def _placeholders(props: Mapping[str, str]) -> dict[str, str]:
    from cdcworker.config.kafkaclient import client_key

    return {k: (_SHAPED_PLACEHOLDERS.get(client_key(k), PLACEHOLDER_SECRET) if v.startswith("${file:") else v)
            for k, v in props.items()}


def validate_connector(body: Mapping[str, Any]) -> list[str]:
    """Problems of one CdcConnector ([] when valid): spec, owned keys, the generated worker config."""
    from cdcoperator.model import API_VERSION, ConnectorResource, SpecError
    from cdcoperator.objects import worker_properties
    from cdcoperator.planner import TaskPlan
    from cdcworker.config import ConfigError, operator_owned, validate
    from cdcworker.config.loader import load_raw

    problems: list[str] = []
    if body.get("apiVersion") != API_VERSION:
        problems.append(f"apiVersion: expected {API_VERSION} (the CRD's version), got "
                        f"{quote(body.get('apiVersion'))}")
    # The CRD's own schema and CEL rules first, with the API server's wording (what kubectl apply says).
    from cdcoperator.validation import validate as validate_against_crd

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


def _check_file(path: str) -> list[tuple[str, list[str]]]:
    """(what, problems) for each connector in the file (``ManifestError``: it cannot be read)."""
    if not path.endswith((".yaml", ".yml", ".json")):
        return [(path, validate_properties(path))]
    out = [(f"{path} CdcConnector/{connector_label(doc, i)}", validate_connector(doc))
           for i, doc in connector_documents(load_documents(path))]
    if not out:
        out.append((path, ["no CdcConnector in the file"]))
    return out


def connector_documents(docs: Sequence[Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """(index, document) of the CdcConnectors among a file's documents; other objects of a bundle
    (Namespaces, Secrets, Applications) are not ours to judge."""
    return [(i, d) for i, d in enumerate(docs) if isinstance(d, Mapping) and d.get("kind") == "CdcConnector"]


def connector_label(doc: Mapping[str, Any], index: int) -> str:
    """The name to call a connector document by in messages (``#<index>`` when it has none)."""
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return quote(name, render=str) if isinstance(name, str) and name else f"#{index}"


def run(args: argparse.Namespace, console: Console | None = None) -> int:
    out = console or Console()
    invalid = False
    for path in args.file:
        try:
            results = _check_file(path)
        except ManifestError as exc:
            Console(stderr=True).print(f"shardcdc validate: {exc}", markup=False, soft_wrap=True)
            return 2
        except OSError as exc:
            Console(stderr=True).print(f"shardcdc validate: cannot read {path}: {exc}", markup=False, soft_wrap=True)
            return 2
        for what, problems in results:
            if problems:
                invalid = True
                out.print(f"[red]invalid[/] {escape(what)}: {len(problems)} problem{'s' if len(problems) != 1 else ''}",
                          soft_wrap=True)
                for p in problems:
                    out.print(f"  - {p}", markup=False, highlight=False, soft_wrap=True)
            else:
                out.print(f"[green]valid[/] {escape(what)}", soft_wrap=True)
    return 1 if invalid else 0
