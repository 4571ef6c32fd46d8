"""The connector's offsets from the operator's side: ``DeleteOffsets`` on deletion, and the one-shot
``shardcdc.io/offsets`` annotation (Strimzi's ``strimzi.io/connector-offsets``) for day-2 changes.

``spec.deletionPolicy: DeleteOffsets`` runs once from the delete handler, after the workers' objects
are gone: every offset record of the connector is tombstoned.

``shardcdc.io/offsets: list | reset | alter`` on a CdcConnector:

* ``list``: the connector's offsets are written to the ConfigMap ``<name>-offsets`` (key
  ``offsets.json``, Kafka Connect's offsets document; the same format as ``shardcdc offsets list
  --json``), any state;
* ``reset``: every offset record is tombstoned; needs ``spec.state: stopped`` with every worker
  exited (``status.assignment.phase: Stopped``), like Strimzi's reset;
* ``alter``: the document in ``<name>-offsets`` ``offsets.json`` (edit a listed one) is written;
  same precondition. ``offset: null`` deletes a partition's record.
* ``handback``, ``handback:<N>``, ``handback:no-per-task``: prepares the offsets for Debezium's
  Vitess connector with shardcdc's task count, ``tasks.max=N``, or without per-task offsets
  (``shardcdc offsets handback``); same precondition. The Debezium settings to use are the event's
  message and the ConfigMap's ``debezium.properties``.

The result (what was done, or why not) is an event on the connector and the ConfigMap's ``result``
key; the annotation is removed afterwards, whatever the outcome. The ConfigMap is owned by the
connector (garbage-collected with it).

The operator reaches the cluster with the workers' client settings (``kafkaaccess``): a cluster whose
credentials are in ``spec.kafka.securitySecretRef`` needs the chart's ``rbac.kafkaSecrets`` (least
privilege by default); without it the message points to that switch and to ``shardcdc offsets``,
which takes the credentials from the user.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import kopf

from cdcoperator import naming
from cdcoperator.apply import CONFIG_MAPS, PLURAL, KubeApi
from cdcoperator.kafkaaccess import KafkaAccess, SecretReader, kafka_access, plain_access
from cdcoperator.model import GROUP, VERSION, ConnectorResource, SpecError, State
from cdcoperator.objects import owner_reference
from cdcoperator.planner import recorded_generation
from cdcworker.jsontypes import JsonMapping, JsonObject
from cdcworker.offsets.edits import (
    apply_changes,
    connect_document,
    entries,
    plan_alter,
    plan_handback,
    plan_reset,
)
from cdcworker.offsets.store import OffsetStore

__all__ = [
    "OFFSETS_ACTIONS",
    "OFFSETS_ANNOTATION",
    "OFFSETS_KEY",
    "RESET_NOTE",
    "RESET_STATUS",
    "delete_offsets",
    "delete_offsets_sync",
    "offsets_config_map_name",
    "offsets_stopped_problem",
    "run_offsets_action",
    "stopped_problem",
]

OFFSETS_ANNOTATION = f"{naming.PREFIX}/offsets"
OFFSETS_ACTIONS = ("list", "reset", "alter", "handback")
OFFSETS_KEY = "offsets.json"
RESULT_KEY = "result"
DEBEZIUM_KEY = "debezium.properties"
LABEL_OFFSETS_OF = f"{naming.PREFIX}/offsets-of"
KAFKA_TIMEOUT = 30.0
REASONS = {"list": "OffsetsListed", "reset": "OffsetsReset", "alter": "OffsetsAltered",
           "handback": "OffsetsHandedBack"}


def _unreachable(access: KafkaAccess) -> str | None:
    problem = access.problem
    return None if problem is None else f"{problem}; or use `shardcdc offsets` with --command-config"


# --- DeleteOffsets -------------------------------------------------------------------------------------


def delete_offsets_sync(cr: ConnectorResource, timeout: float = KAFKA_TIMEOUT, access: KafkaAccess | None = None) -> str:

    kafka = cr.spec.kafka
    access = access or plain_access(cr)
    if access.config is None:
        return (f"offsets of {cr.name} in topic {kafka.offsets_topic} were kept: {access.problem}; delete the "
                "records with `shardcdc offsets reset`")
    with OffsetStore(access.config, kafka.offsets_topic, timeout=timeout) as store:
        changes = plan_reset(store.load(), cr.name)
        apply_changes(store, changes, timeout=timeout)
    return f"deleted {len(changes)} offset records of {cr.name} from topic {kafka.offsets_topic}"


async def delete_offsets(body: JsonMapping, read_secret: SecretReader | None = None) -> tuple[bool, str]:
    """(deleted, message for the event)."""
    cr = ConnectorResource.from_body(body)
    try:
        access = await kafka_access(cr, read_secret) if read_secret is not None else plain_access(cr)
        message = await asyncio.to_thread(delete_offsets_sync, cr, KAFKA_TIMEOUT, access)
    except Exception as exc:  # the connector is being deleted either way; say what happened
        return False, f"offsets of {cr.name} were not deleted: {exc}"
    return message.startswith("deleted "), message


# --- the shardcdc.io/offsets annotation ---------------------------------------------------------------


def offsets_config_map_name(connector: str) -> str:
    name = f"{connector}-offsets"
    return name if len(name) <= 253 else f"{connector[:240]}-offsets"


# After a reset the recorded generation must go too: its workers would look for the previous
# generation's keys (deleted) and fail with "No offset found". Cleared, the connector starts over
# at generation 0 as snapshot.mode says, and the old generation's stopped workers are removed.
RESET_STATUS: JsonObject = {"assignment": None, "adoptedOffsets": None}
RESET_NOTE = ("the generation record was cleared with the offsets: when running again the connector starts over "
              "at generation 0 as snapshot.mode says")


# How to stop a connector, for the messages of stopped_problem (kubectl, or local mode's manifest).
KUBECTL_STOP = "set it to 'stopped' first (kubectl patch cdc/<name> --type=merge -p '{\"spec\":{\"state\":\"stopped\"}}')"
LOCAL_STOP = ("set it to 'stopped' first (in the manifest: the running `shardcdc run` re-applies it), or stop "
              "`shardcdc run` (Ctrl-C: every worker commits and exits)")


def stopped_problem(body: Any, how_to_stop: str = KUBECTL_STOP) -> str | None:  # Any: a kopf Body or a plain JSON object
    """Why a CdcConnector is not safe to change offsets of (None: it is stopped, every worker exited)."""
    spec = body.get("spec") or {}
    state = spec.get("state") or State.RUNNING.value  # the plain word: the message shows its repr
    if state != State.STOPPED:
        return f"spec.state is {state!r}; {how_to_stop}"
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    if int(status.get("observedGeneration") or -1) != int(meta.get("generation") or 0):
        return "the operator has not yet observed spec.state: stopped; try again in a moment"
    assignment = status.get("assignment")
    # The phase turns Stopped at once; the workers may still be flushing their last offsets in
    # their termination grace, which would land after (and undo) a change made now.
    if assignment and (assignment.get("phase") != "Stopped" or assignment.get("stoppedCleanly") is not True):
        return f"workers of generation {assignment.get('generation')} have not all exited yet " \
               f"(phase {assignment.get('phase')}); try again in a moment"
    return None


def offsets_stopped_problem(body: JsonMapping, live_pods: int) -> str | None:
    """Why offsets of this connector may not be changed now (None: stopped and every worker exited)."""
    problem = stopped_problem(body)
    if problem is None and live_pods:
        problem = f"{live_pods} worker pods still exist; wait until they are gone"
    return problem


def parse_handback(value: str, body: JsonMapping) -> tuple[bool, int]:
    """``handback[:N|:no-per-task]`` -> (per task, Debezium's tasks.max; default shardcdc's task count)."""
    _, _, arg = value.partition(":")
    if arg == "no-per-task":
        return False, 1
    if not arg:
        tasks = ((body.get("status") or {}).get("assignment") or {}).get("tasks") or (body.get("spec") or {}).get("tasks")
        return True, int(tasks or 1)
    if not arg.isdigit() or int(arg) < 1:
        raise ValueError(f"{arg!r} is not a tasks.max; give handback, handback:<tasks.max> or handback:no-per-task")
    return True, int(arg)


def _handback(cr: ConnectorResource, body: JsonMapping, records: Mapping[bytes, bytes], value: str
              ) -> tuple[list[Any], str]:  # Any: offset records of several types (cdcworker.offsets)
    """The hand-back's changes and the Debezium properties to use (``shardcdc offsets handback``)."""

    per_task, tasks_max = parse_handback(value, body)
    recorded = recorded_generation(body)
    server = cr.spec.kafka.topic_prefix
    changes, handback = plan_handback(records, cr.name, server, recorded, per_task=per_task, tasks_max=tasks_max)
    lines = [f"name={cr.name}", f"topic.prefix={server}", *(f"{k}={v}" for k, v in handback.settings),
             *(f"# remove {k}" for k in handback.remove)]
    return changes, "\n".join(lines) + "\n"


def run_offsets_action(cr: ConnectorResource, action: str, document: JsonMapping | None,
                       timeout: float = KAFKA_TIMEOUT, access: KafkaAccess | None = None,
                       body: JsonMapping | None = None) -> tuple[str, JsonObject]:
    """Carry out one action against Kafka: (result message, the offsets document after it). For
    ``handback`` (``action`` is the annotation's value) the document also has the Debezium
    properties under ``debezium.properties``."""

    topic = cr.spec.kafka.offsets_topic
    access = access or plain_access(cr)
    if access.config is None:
        raise ValueError(access.problem)
    with OffsetStore(access.config, topic, timeout=timeout) as store:
        records = store.load()
        if action == "list":
            listed = entries(records, cr.name)
            return f"listed {len(listed)} offset records of {cr.name} from topic {topic}", connect_document(listed)
        properties = None
        if action == "reset":
            changes = plan_reset(records, cr.name)
            verb = "deleted"
        elif action.startswith("handback"):
            changes, properties = _handback(cr, body or {}, records, action)
            verb = "wrote"
        else:
            if document is None:
                raise ValueError(f"ConfigMap {offsets_config_map_name(cr.name)} has no {OFFSETS_KEY} to alter from")
            changes = plan_alter(records, cr.name, document)
            verb = "wrote"
        apply_changes(store, changes, timeout=timeout)
        after = connect_document(entries(store.records, cr.name))
        message = f"{verb} {len(changes)} offset records of {cr.name} in topic {topic}"
        if properties is not None:
            settings = ", ".join(line for line in properties.splitlines() if "=" in line and not line.startswith("name="))
            message += f"; Debezium settings: {settings}"
            after[DEBEZIUM_KEY] = properties
        return message, after


def _config_map(body: JsonMapping, data: Mapping[str, str]) -> JsonObject:

    cr_meta = body["metadata"]
    owner = owner_reference(ConnectorResource.from_body(body))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": offsets_config_map_name(cr_meta["name"]),
            "namespace": cr_meta["namespace"],
            "labels": {LABEL_OFFSETS_OF: cr_meta["name"], naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
            "ownerReferences": [owner],
        },
        "data": dict(data),
    }


async def handle_offsets_annotation(kube: KubeApi, body: JsonMapping, live_pods: int,
                                    emit: Any) -> str:  # Any: kopf's event-posting callable (untyped)
    """Act on ``shardcdc.io/offsets`` once and remove it; returns the outcome ("done", "refused", ...).

    ``reset`` / ``alter`` asked while the connector is stopping (spec.state stopped, its workers
    not all exited yet) wait instead of being refused: the annotation stays ("waiting") and the
    resync acts on it once the workers are gone, whatever order the events came in.
    """
    meta = body.get("metadata") or {}
    value = str((meta.get("annotations") or {}).get(OFFSETS_ANNOTATION, ""))
    request = value.strip().lower()  # handback carries its argument: handback:<N>
    action = request.partition(":")[0]
    stopping = (body.get("spec") or {}).get("state") == State.STOPPED  # asked for: what is left passes by itself
    if action in ("reset", "alter", "handback") and stopping and offsets_stopped_problem(body, live_pods) is not None:
        return "waiting"
    namespace, name = str(meta.get("namespace") or "default"), str(meta["name"])
    cm_name = offsets_config_map_name(name)
    outcome = "done"
    cr: ConnectorResource | None = None
    access: KafkaAccess | None = None
    problem: str | None = None
    try:
        cr = ConnectorResource.from_body(body)
        access = await kafka_access(cr, kube.read_secret)
    except SpecError as exc:
        problem = f"invalid spec: {exc}"
    if action not in OFFSETS_ACTIONS or (action != "handback" and request != action):
        problem = f"{OFFSETS_ANNOTATION}={value!r} is not one of {', '.join(OFFSETS_ACTIONS)}"
    elif access is not None and (problem := _unreachable(access)) is None and action != "list":
        problem = offsets_stopped_problem(body, live_pods)
    if problem is None and action == "handback":
        try:
            parse_handback(request, body)
        except ValueError as exc:
            problem = str(exc)
    live_cm = await kube.call("GET", CONFIG_MAPS.path(namespace, cm_name), allow=(404,))
    data = dict((live_cm or {}).get("data") or {})
    if problem is not None or cr is None:
        outcome = "refused"
        emit(body, "Warning", "OffsetsRefused", f"{OFFSETS_ANNOTATION}={value}: {problem}")
    else:
        document: JsonObject | None = None
        if action == "alter" and data.get(OFFSETS_KEY):
            try:
                document = json.loads(data[OFFSETS_KEY])
            except ValueError as exc:
                problem = f"{cm_name} {OFFSETS_KEY} is not JSON: {exc}"
        try:
            if problem is not None:
                raise ValueError(problem)
            message, after = await asyncio.to_thread(run_offsets_action, cr, request, document, KAFKA_TIMEOUT,
                                                     access, body)
        except Exception as exc:  # Kafka, a bad document: report it on the connector, do not retry forever
            outcome = "failed"
            message = f"{OFFSETS_ANNOTATION}={action} failed: {exc}"
            emit(body, "Warning", "OffsetsFailed", message)
        else:
            if DEBEZIUM_KEY in after:
                data[DEBEZIUM_KEY] = after.pop(DEBEZIUM_KEY)
            data[OFFSETS_KEY] = json.dumps(after, indent=2) + "\n"
            emit(body, "Normal", REASONS[action], message)
            if action == "reset" and (body.get("status") or {}).get("assignment"):
                await kube.patch_connector_status(namespace, name, RESET_STATUS)
                emit(body, "Normal", "GenerationRecordCleared", RESET_NOTE)
        data[RESULT_KEY] = message
        await kube.apply(_config_map(body, data), live_cm)
    await kube.remove_annotation(namespace, name, OFFSETS_ANNOTATION, value)
    return outcome


def has_offsets_annotation(body: JsonMapping) -> bool:
    return OFFSETS_ANNOTATION in ((body.get("metadata") or {}).get("annotations") or {})


async def process_offsets_annotation(memo: kopf.Memo, namespace: str, name: str) -> None:
    """Handle the annotation if the connector (read fresh, under the operator's lock) still has it."""
    # Call-time import: handlers imports this module when it registers the kopf handlers.
    from cdcoperator.handlers import _emit, _lock

    live = len(await memo.pods.pods(namespace, name))  # a pod shutting down still flushes offsets
    async with _lock(namespace, name):
        fresh = await memo.kube.get_connector(namespace, name)
        if fresh is None or not has_offsets_annotation(fresh):
            return
        await handle_offsets_annotation(memo.kube, fresh, live, _emit)


# kopf: act when the annotation appears (update), or is found at operator start (resume); the
# resync timer also looks for it (level-based), since kopf can miss an annotation set again right
# after the handler removed it (seen in CI: "offsets=reset" never handled).
@kopf.on.resume(GROUP, VERSION, PLURAL, annotations={OFFSETS_ANNOTATION: kopf.PRESENT})
@kopf.on.create(GROUP, VERSION, PLURAL, annotations={OFFSETS_ANNOTATION: kopf.PRESENT})
@kopf.on.update(GROUP, VERSION, PLURAL, annotations={OFFSETS_ANNOTATION: kopf.PRESENT})
async def offsets_annotation(memo: kopf.Memo, body: kopf.Body, namespace: str | None, name: str, **kwargs: object) -> None:
    await process_offsets_annotation(memo, namespace or "default", name)
