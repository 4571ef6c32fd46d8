"""The reconcile's parts without Kubernetes: shard discovery (against the VTGate test server),
task observation (pods + status documents -> TaskReport), status building and patches."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest
from operator_local_fixtures import pod

from cdcoperator import naming
from cdcoperator.discovery import (
    Discovery,
    DiscoveryError,
    discover,
    discover_via_vtctld,
    discover_via_vtgate,
)
from cdcoperator.model import ConnectorResource, VitessSource
from cdcoperator.planner import Journal, TaskPhase, TaskReport, plan
from cdcoperator.reconcile import (
    build_status,
    completes_transition,
    merge_patch,
    parse_restart,
    restart_stamp,
)
from cdcoperator.taskstatus import PodSummary, journal_from, summarize_pod, task_report
from kubetest.controlplane import free_port
from vtgatesim import VTGateSim

# --- discovery -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        s.create_keyspace("two", ["-80", "80-"])
        s.create_keyspace("split", ["-80", "80-"])
        s.create_keyspace("one", ["0"])
        s.reshard("split", ["-40", "40-80", "80-c0", "c0-"])
        yield s


def test_vtgate_lists_serving_shards_in_key_range_order(sim: VTGateSim) -> None:
    assert discover_via_vtgate(sim.address, "two") == Discovery(("-80", "80-"), ("-80", "80-"), "vtgate")
    assert discover_via_vtgate(sim.address, "one") == Discovery(("0",), ("0",), "vtgate")
    # After a split only the targets serve; VTGate knows nothing else.
    assert discover_via_vtgate(sim.address, "split").serving == ("-40", "40-80", "80-c0", "c0-")
    assert discover_via_vtgate(sim.address, "missing").serving == ()


def test_vtctld_separates_serving_from_discovered(sim: VTGateSim) -> None:
    d = discover_via_vtctld(sim.address, "split", "REPLICA")
    assert d == Discovery(("-40", "40-80", "80-c0", "c0-"), ("-40", "-80", "40-80", "80-c0", "80-", "c0-"), "vtctld")
    assert discover_via_vtctld(sim.address, "two", "MASTER").serving == ("-80", "80-")


def test_discover_prefers_vtctld(sim: VTGateSim) -> None:
    closed = f"127.0.0.1:{free_port()}"
    with_vtctld = VitessSource(vtgate=closed, keyspace="split", vtctld=sim.address)
    assert discover(with_vtctld).via == "vtctld"
    assert discover(VitessSource(vtgate=sim.address, keyspace="two")).via == "vtgate"


def test_discovery_errors_name_the_endpoint(sim: VTGateSim) -> None:
    with pytest.raises(DiscoveryError) as err:
        discover_via_vtctld(sim.address, "missing")
    assert str(err.value) == (f"vtctld FindAllShardsInKeyspace/GetSrvKeyspaces(missing) at {sim.address} failed: "
                              "NOT_FOUND: node doesn't exist: keyspaces/missing/Keyspace")
    closed = f"127.0.0.1:{free_port()}"
    with pytest.raises(DiscoveryError) as err:
        discover_via_vtgate(closed, "two", timeout=2)
    assert str(err.value).startswith(f"vtgate SHOW VITESS_SHARDS at {closed} failed: UNAVAILABLE: ")


# --- task observation ---------------------------------------------------------------------------------------


def pod_body(phase: str = "Running", ready: bool = True, state: dict[str, Any] | None = None,
             last: dict[str, Any] | None = None, deleting: bool = False) -> dict[str, Any]:
    cs: dict[str, Any] = {"name": "worker", "ready": ready, "restartCount": 2 if last else 0,
                          "state": state or {"running": {}}}
    if last:
        cs["lastState"] = {"terminated": last}
    meta: dict[str, Any] = {"name": "c-g3-t1-abc", "labels": {"shardcdc.io/generation": "3", "shardcdc.io/task": "1"}}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta,
            "spec": {"containers": [{"name": "worker", "ports": [{"name": "metrics", "containerPort": 8080}]}]},
            "status": {"phase": phase, "podIP": "10.1.2.3", "containerStatuses": [cs]}}


JOURNAL = {"journal": {"participants": ["80-", "-80"], "positions": [{"shard": "c0-", "gtid": "g2"},
                                                                      {"shard": "-40", "gtid": "g1"}]}}


def test_summarize_pod() -> None:
    s = summarize_pod(pod_body(last={"exitCode": 10, "message": json.dumps(JOURNAL)},
                               state={"waiting": {"reason": "CrashLoopBackOff"}}, ready=False))
    assert s == PodSummary(name="c-g3-t1-abc", generation=3, task=1, phase="Running", deleting=False, ip="10.1.2.3",
                           port=8080, ready=False, waiting_reason="CrashLoopBackOff", exit_code=10,
                           termination_message=json.dumps(JOURNAL), restarts=2)
    assert summarize_pod({"metadata": {"name": "x", "labels": {}}}) is None


def test_journal_shapes() -> None:
    expected = Journal(("-80", "80-"), (("-40", "g1"), ("c0-", "g2")))
    assert journal_from(JOURNAL) == expected
    assert journal_from({"journal": {"participants": ["-80", "80-"], "positions": {"c0-": "g2", "-40": "g1"}}}) == expected
    assert journal_from({"journal": {"participants": [], "positions": {}}}) is None
    assert journal_from(None) is None


def _s(**kw: Any) -> PodSummary:
    summary = summarize_pod(pod_body(**kw))
    assert summary is not None
    return summary


STREAMING_DOC = {"state": "streaming", "low_watermark_lag_ms": 2500,
                 "shards": [{"shard": "-80", "gtid": "a", "durable_gtid": "b", "lag_ms": 7},
                            {"shard": "80-", "gtid": "c", "durable_gtid": None, "lag_ms": None}]}


@pytest.mark.parametrize(
    ("replicas", "pods", "doc", "expected"),
    [
        (1, [], None, TaskReport(3, 1, TaskPhase.PENDING)),
        (0, [], None, TaskReport(3, 1, TaskPhase.EXITED)),
        (1, [_s()], STREAMING_DOC,
         TaskReport(3, 1, TaskPhase.STREAMING, pod="c-g3-t1-abc", position="-80@b;80-@c", lag_ms=2500)),
        (1, [_s()], {"state": "snapshotting"}, TaskReport(3, 1, TaskPhase.SNAPSHOTTING, pod="c-g3-t1-abc")),
        (1, [_s()], {"state": "reconnecting"}, TaskReport(3, 1, TaskPhase.STARTING, pod="c-g3-t1-abc")),
        (1, [_s()], {"state": "failed", "reason": "bad password"},
         TaskReport(3, 1, TaskPhase.FAILED, pod="c-g3-t1-abc", message="bad password")),
        (0, [_s()], {"state": "stopped"}, TaskReport(3, 1, TaskPhase.EXITED, pod="c-g3-t1-abc")),
        (1, [_s()], {"state": "completed", "reason": "snapshot done"},
         TaskReport(3, 1, TaskPhase.COMPLETED, pod="c-g3-t1-abc")),
        (1, [_s()], {"state": "reassignment_needed", "reason": "journal", **JOURNAL},
         TaskReport(3, 1, TaskPhase.REASSIGNMENT_NEEDED, pod="c-g3-t1-abc", message="journal",
                    journal=Journal(("-80", "80-"), (("-40", "g1"), ("c0-", "g2"))), running=True)),
        # The document is unreachable: the pod decides.
        (1, [_s(ready=False, state={"waiting": {"reason": "CrashLoopBackOff"}},
                last={"exitCode": 10, "message": json.dumps(JOURNAL)})], None,
         TaskReport(3, 1, TaskPhase.REASSIGNMENT_NEEDED, pod="c-g3-t1-abc",
                    message="worker stopped at a reshard journal",
                    journal=Journal(("-80", "80-"), (("-40", "g1"), ("c0-", "g2"))), running=True)),
        # Terminated for good (the pod failed): nothing of this task runs any more.
        (1, [_s(phase="Failed", ready=False, state={"terminated": {"exitCode": 10, "message": json.dumps(JOURNAL)}},
                last={"exitCode": 10, "message": json.dumps(JOURNAL)})], None,
         TaskReport(3, 1, TaskPhase.REASSIGNMENT_NEEDED, pod="c-g3-t1-abc",
                    message="worker stopped at a reshard journal",
                    journal=Journal(("-80", "80-"), (("-40", "g1"), ("c0-", "g2"))))),
        (1, [_s(ready=False, state={"waiting": {"reason": "CrashLoopBackOff"}}, last={"exitCode": 1})], None,
         TaskReport(3, 1, TaskPhase.FAILED, pod="c-g3-t1-abc", message="CrashLoopBackOff (exit status 1)")),
        # The worker named the reason (refused credentials) in its termination message.
        (1, [_s(ready=False, state={"waiting": {"reason": "CrashLoopBackOff"}},
                last={"exitCode": 1, "message": json.dumps({"error": "Kafka refused the connection: SASL"})})], None,
         TaskReport(3, 1, TaskPhase.FAILED, pod="c-g3-t1-abc",
                    message="CrashLoopBackOff (exit status 1): Kafka refused the connection: SASL")),
        (1, [_s()], None, TaskReport(3, 1, TaskPhase.STREAMING, pod="c-g3-t1-abc")),
        (1, [_s(ready=False)], None, TaskReport(3, 1, TaskPhase.STARTING, pod="c-g3-t1-abc")),
        (1, [_s(phase="Pending", ready=False, state={"waiting": {"reason": "ContainerCreating"}})], None,
         TaskReport(3, 1, TaskPhase.PENDING, pod="c-g3-t1-abc")),
        (0, [_s(phase="Succeeded", ready=False, state={"terminated": {"exitCode": 0}})], None,
         TaskReport(3, 1, TaskPhase.EXITED, pod="c-g3-t1-abc")),
        (1, [_s(phase="Failed", ready=False, state={"terminated": {"exitCode": 2}})], None,
         TaskReport(3, 1, TaskPhase.FAILED, pod="c-g3-t1-abc", message="worker exited with status 2")),
        (1, [_s(phase="Failed", ready=False, state={"terminated": {"exitCode": 1, "message": '{"error": "no CA"}'}})],
         None, TaskReport(3, 1, TaskPhase.FAILED, pod="c-g3-t1-abc", message="worker exited with status 1: no CA")),
    ],
    ids=["no-pod", "scaled-to-zero", "streaming", "snapshotting", "reconnecting", "failed", "stopped", "completed",
         "reassignment-doc", "reassignment-exit-code", "reassignment-pod-failed", "crashloop", "crashloop-reason",
         "ready-no-doc", "starting-no-doc", "pending", "succeeded", "failed-pod", "failed-pod-reason"],
)
def test_task_report(replicas: int, pods: list[PodSummary], doc: dict[str, Any] | None,
                     expected: TaskReport) -> None:
    assert task_report(3, 1, replicas, pods, doc) == expected


def test_a_status_document_of_another_worker_is_not_this_pods() -> None:
    from cdcoperator.taskstatus import belongs_to

    pod = _s()  # generation 3, task 1
    assert belongs_to(pod, {"generation": 3, "task": "task1_2_3"})
    assert belongs_to(pod, {"generation": 3, "task": "0"})  # single-task mode: no key to compare
    assert not belongs_to(pod, {"generation": 2, "task": "task1_2_2"})  # a previous generation's process
    assert not belongs_to(pod, {"generation": 3, "task": "task0_2_3"})  # another task on a reused port


# --- restart annotation, merge patches, status ---------------------------------------------------------------


def test_parse_restart() -> None:
    assert parse_restart("", 3) == parse_restart("all", 3) == parse_restart("true", 3) == (0, 1, 2)
    assert parse_restart("task=2", 3) == (2,)
    assert parse_restart("task=3", 3) is None
    assert parse_restart("task=x", 3) is None
    assert parse_restart("later", 3) is None


def test_restart_stamps_within_one_second_differ() -> None:
    first = dt.datetime(2024, 5, 6, 7, 8, 9, 100, tzinfo=dt.UTC)
    assert restart_stamp(first) == "2024-05-06T07:08:09.000100Z"
    assert restart_stamp(first + dt.timedelta(milliseconds=300)) == "2024-05-06T07:08:09.300100Z"
    assert restart_stamp(first.astimezone(dt.timezone(dt.timedelta(hours=2)))) == "2024-05-06T07:08:09.000100Z"


def test_merge_patch() -> None:
    old = {"a": 1, "b": {"c": 1, "d": 2}, "e": [1, 2], "f": "x"}
    new = {"a": 1, "b": {"c": 1}, "e": [1], "g": True}
    assert merge_patch(old, new) == {"b": {"d": None}, "e": [1], "f": None, "g": True}
    assert merge_patch(new, new) == {}


BODY = {
    "metadata": {"name": "orders", "namespace": "shop", "uid": "u", "generation": 4},
    "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "ks"}},
             "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "shop"}, "tasks": 2},
}


def test_status_is_stable_when_nothing_changes() -> None:
    cr = ConnectorResource.from_body(BODY)
    shards = ("-80", "80-")
    p0 = plan(cr.spec, shards, None)
    t0 = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)
    first = build_status(cr, {}, p0, Discovery(shards, shards, "vtgate"), (), t0)
    assert first["assignment"]["taskStates"] == [{"id": 0, "shards": ["-80"], "phase": "Pending"},
                                                 {"id": 1, "shards": ["80-"], "phase": "Pending"}]
    assert first["shards"] == {"discovered": ["-80", "80-"], "serving": ["-80", "80-"], "servingCount": 2,
                               "lastDiscoveryTime": "2024-05-01T12:00:00Z"}
    reports = [TaskReport(0, t, TaskPhase.STREAMING, pod=f"p{t}", lag_ms=1200 + t) for t in (0, 1)]
    p1 = plan(cr.spec, shards, p0.generation, reports)
    second = build_status(cr, first, p1, Discovery(shards, shards, "vtgate"), reports, t0 + dt.timedelta(minutes=1))
    assert second["lag"] == "1s"
    ready = next(c for c in second["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2024-05-01T12:01:00Z")
    # The same observation later: nothing to write.
    third = build_status(cr, second, plan(cr.spec, shards, p1.generation, reports),
                         Discovery(shards, shards, "vtgate"), reports, t0 + dt.timedelta(minutes=5))
    assert merge_patch(second, third) == {}
    # The source goes away: the last known shard list stays, Degraded says why.
    p_err = plan(cr.spec, None, p1.generation, reports, source_error="vtgate down")
    fourth = build_status(cr, third, p_err, None, reports, t0 + dt.timedelta(minutes=6))
    patch = merge_patch(third, fourth)
    assert "shards" not in patch and "assignment" not in patch
    degraded = next(c for c in fourth["conditions"] if c["type"] == "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "SourceUnreachable")


def test_delete_offsets_keeps_records_it_cannot_reach() -> None:
    from cdcoperator.offsets import delete_offsets_sync

    body = json.loads(json.dumps(BODY))
    body["spec"]["kafka"].update(securityProtocol="SASL_SSL",
                                 securitySecretRef={"name": "kafka", "properties": ["sasl.jaas.config"]})
    assert delete_offsets_sync(ConnectorResource.from_body(body)) == (
        "offsets of orders in topic shardcdc-offsets were kept: the Kafka cluster of orders needs the credentials "
        "in Secret shop/kafka, which the operator reads only when installed with rbac.kafkaSecrets=true; delete "
        "the records with `shardcdc offsets reset`")


def test_offsets_annotation_waits_while_the_connector_is_stopping() -> None:
    """reset/alter asked right after spec.state: stopped wait for the workers to exit (the annotation
    stays for the resync) instead of being refused; list and a running connector are answered."""
    from cdcoperator.offsets import handle_offsets_annotation

    class Kube:
        def __init__(self) -> None:
            self.calls: list[str] = []

        async def call(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            self.calls.append(f"{method} {path}")
            return None

        async def read_secret(self, namespace: str, name: str) -> Any:
            return None

        async def apply(self, obj: Any, live: Any) -> None:
            self.calls.append("apply")

        async def remove_annotation(self, namespace: str, name: str, key: str, value: str) -> None:
            self.calls.append(f"remove {value}")

    def connector(action: str, state: str, phase: str, clean: bool) -> dict[str, Any]:
        body = copy.deepcopy(BODY)
        body["metadata"].update(generation=4, annotations={"shardcdc.io/offsets": action})
        body["spec"]["state"] = state
        body["status"] = {"observedGeneration": 4, "assignment": {"generation": 1, "phase": phase,
                                                                  "stoppedCleanly": clean}}
        return body

    events: list[tuple[str, str]] = []

    def emit(_body: Any, type_: str, reason: str, _message: str) -> None:
        events.append((type_, reason))

    for action in ("reset", "alter"):
        kube = Kube()
        assert asyncio.run(handle_offsets_annotation(kube, connector(action, "stopped", "Stopped", False), 0,
                                                     emit)) == "waiting"
        assert asyncio.run(handle_offsets_annotation(kube, connector(action, "stopped", "Stopped", True), 2,
                                                     emit)) == "waiting"  # pods still there
        assert kube.calls == [] and events == []
    kube = Kube()
    assert asyncio.run(handle_offsets_annotation(kube, connector("reset", "running", "Streaming", False), 0,
                                                 emit)) == "refused"
    assert events == [("Warning", "OffsetsRefused")] and kube.calls[-1] == "remove reset"


def test_delete_offsets_tombstones_only_this_connectors_records(kafka_broker: Any) -> None:
    import uuid

    from cdcoperator.offsets import delete_offsets_sync
    from cdcworker.offsets import OffsetPartition, OffsetValue, ShardGtid, Vgtid
    from cdcworker.offsets.store import OffsetStore

    topic = f"offsets-{uuid.uuid4().hex[:8]}"
    body = json.loads(json.dumps(BODY))
    body["spec"]["kafka"].update(bootstrapServers=kafka_broker.bootstrap, offsetsTopic=topic)
    config = {"bootstrap.servers": kafka_broker.bootstrap}
    value = OffsetValue.build(Vgtid((ShardGtid("ks", "-80", "MySQL56/a:1-5"),)))
    with OffsetStore(config, topic) as store:
        store.ensure_topic()
        for tid in (0, 1):
            store.write("orders", OffsetPartition.for_task("shop", tid, 2, 0), value)
        store.write("other", OffsetPartition.for_task("shop", 0, 1, 0), value)
    assert delete_offsets_sync(ConnectorResource.from_body(body)) == (
        f"deleted 2 offset records of orders from topic {topic}")
    with OffsetStore(config, topic) as store:
        remaining = store.load()
    assert [json.loads(k)[0] for k in remaining] == ["other"]


def test_an_unschedulable_pod_is_a_failed_task() -> None:
    """A worker pod the scheduler cannot place stayed Pending (Progressing) for ever; nothing
    streams its shards, so the task is Failed with the scheduler's message (Degraded)."""
    body = {"metadata": {"name": "c-g0-t1-x", "labels": {naming.LABEL_GENERATION: "0", naming.LABEL_TASK: "1"}},
            "spec": {"containers": [{"name": "worker", "ports": [{"name": "metrics", "containerPort": 8080}]}]},
            "status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu."}]}}
    pod = summarize_pod(body)
    assert pod is not None and pod.unschedulable == "0/3 nodes are available: 3 Insufficient cpu."
    report = task_report(0, 1, 1, [pod], None)
    assert (report.phase, report.message) == (
        TaskPhase.FAILED, "pod cannot be scheduled: 0/3 nodes are available: 3 Insufficient cpu.")
    body["status"]["conditions"][0].update(status="True", reason="")
    assert task_report(0, 1, 1, [summarize_pod(body)], None).phase is TaskPhase.PENDING  # type: ignore[list-item]


def test_pod_events_that_complete_a_transition_reconcile_at_once() -> None:
    """Scale -> new generation waits on two steps the resync timer used to find: the drained
    generation's last worker gone, and the new generation's last worker ready. Those events (and
    only those) reconcile the connector at once."""
    old = [pod(f"c-g0-t{i}", 0, i, ready=True) for i in range(3)]
    # The drain: the first two exits leave a worker of generation 0; the third is the last.
    assert not completes_transition(old, old[0], deleted=True)
    assert not completes_transition(old[1:], old[1], deleted=True)
    assert completes_transition(old[2:], old[2], deleted=True)
    # The new generation: starting, then ready one by one; the last ready one completes it.
    new = [pod(f"c-g1-t{i}", 1, i, phase="Pending") for i in range(2)]
    up0 = pod("c-g1-t0", 1, 0, ready=True)
    assert not completes_transition(new, up0, deleted=False)  # t1 still Pending
    up1 = pod("c-g1-t1", 1, 1, ready=True)
    assert completes_transition([up0, new[1]], up1, deleted=False)
    # Not while an old worker is still there, nor for a pod that is not ready or is terminating.
    assert not completes_transition([old[0], up0, new[1]], up1, deleted=False)
    assert not completes_transition([up0, new[1]], pod("c-g1-t1", 1, 1), deleted=False)
    assert not completes_transition([up0], pod("c-g1-t1", 1, 1, ready=True, deleting=True), deleted=False)
