"""The operator releases the workers from runs that will not finish, against a real kube-apiserver
and broker: a ``spec.backfills[]`` entry removed mid-run gets its ``abandon`` marker only once the
run's pods are gone (a driver still running could emit a chunk after the workers released); a
run whose Spark application failed for good gets one with the reason; each once; other runs none."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from operator_kube_fixtures import wait_for
from test_backfill_operator import CRD_PATH, install_spark_crd

from cdcoperator import backfill as bf
from cdcoperator import backfillfeed
from cdcoperator.apply import KubeApi
from cdcoperator.model import ConnectorResource
from cdcworker.backfill.progress import ChunkDone, PlanRecord, RunAbandoned, parse_record
from cdcworker.backfill.spec import Chunk
from kubetest import KubeControlPlane, kube_control_plane_fixture
from localkafka import KafkaBroker, consume_all

NS = "bfrelease"
NOW = "2026-01-02T03:04:05Z"


@pytest.fixture(scope="module")
def plane() -> Iterator[KubeControlPlane]:
    for p in kube_control_plane_fixture():
        p.ensure_namespace(NS)
        p.kubectl("apply", "-f", str(CRD_PATH), check=True)
        install_spark_crd(p)
        p.wait_established("cdcconnectors.shardcdc.io", "sparkapplications.sparkoperator.k8s.io")
        yield p


def _write(broker: KafkaBroker, topic: str, records: list[Any]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for r in records:
        p.produce(topic, r.value(), r.key())
    assert p.flush(30) == 0


def _abandons(broker: KafkaBroker, topic: str) -> list[tuple[str, int | None, str, str]]:
    out = []
    for r in consume_all(broker.bootstrap, topic):
        rec = parse_record(r.value) if r.value else None
        if isinstance(rec, RunAbandoned):
            out.append((rec.run_id, rec.epoch, rec.reason, rec.by))
    return out


def test_cancelled_and_failed_runs_are_released_once_their_pods_are_gone(plane: KubeControlPlane,
                                                                         kafka_broker: KafkaBroker) -> None:
    prefix = f"rel{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.backfill-progress"
    body = {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": prefix, "namespace": NS},
            "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "commerce"}},
                     "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topicPrefix": prefix},
                     "snapshot": {"mode": "never", "backfill": {"engine": "sparkOperator",
                                                                "spark": {"image": "shardcdc-spark:1"}}},
                     "backfills": [{"id": "b1", "tables": ["items"]}, {"id": "b2", "tables": ["orders"]}]}}
    out = plane.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(body))
    assert out.returncode == 0, out.stderr
    cr = ConnectorResource.from_body(json.loads(out.stdout))
    run1, run2, other = f"b1-{cr.uid[:8]}", f"b2-{cr.uid[:8]}", "bf-by-hand"
    # The jobs' records: both runs planned and under way; a run started by hand is not the operator's.
    _write(kafka_broker, topic, [PlanRecord(r, "commerce", "-80", t, ("id",), 3, 300, "even")
                                 for r, t in ((run1, "items"), (run2, "orders"), (other, "items"))])
    feeds = backfillfeed.ProgressFeeds(idle_seconds=60)
    status: dict[str, Any] = {}

    def get(kind: str, name: str) -> dict[str, Any] | None:
        r = plane.kubectl("get", kind, name, "-n", NS, "-o", "json")
        return json.loads(r.stdout) if r.returncode == 0 else None

    with plane.api_client() as client:
        kube = KubeApi(client)

        def step(c: ConnectorResource) -> dict[str, dict[str, Any]]:
            entries, _cond = asyncio.run(bf.reconcile_backfills(kube, c, status, NOW, feeds))
            status["backfills"] = entries
            return {e["id"]: e for e in entries}

        try:
            wait_for(lambda: step(cr)["b1"].get("chunksTotal") == 3, 30, "the runs read from the topic")
            assert get("sparkapplication", f"{prefix}-bf-b1") is not None
            # b1's driver pod (as the spark-operator creates it, with the run's labels).
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{prefix}-bf-b1-driver", "namespace": NS,
                                                                   "labels": bf.labels(cr, "b1")},
                   "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "shardcdc-spark:1"}]}}
            assert plane.kubectl("create", "-f", "-", input=json.dumps(pod)).returncode == 0
            # b1 leaves the spec: its application goes at once, the marker waits for its pod.
            plane.kubectl("patch", "cdcconnector", prefix, "-n", NS, "--type=merge", "-p",
                          json.dumps({"spec": {"backfills": [{"id": "b2", "tables": ["orders"]}]}}), check=True)
            cr2 = ConnectorResource.from_body(get("cdcconnector", prefix) or {})
            assert set(step(cr2)) == {"b2"} and get("sparkapplication", f"{prefix}-bf-b1") is None
            # Read back: a chunk record written after that reconcile shows in b2's counts, so the feed's
            # thread went round since; still no marker (the driver pod is there).
            _write(kafka_broker, topic, [ChunkDone(Chunk(run2, "commerce", "-80", "orders", 0, ("id",), None, (5,)),
                                                   10, "l", "h")])
            wait_for(lambda: step(cr2)["b2"].get("chunksDone") == 1, 30, "b2's chunk counted")
            assert _abandons(kafka_broker, topic) == []
            plane.kubectl("delete", "pod", f"{prefix}-bf-b1-driver", "-n", NS, "--wait=true", check=True)
            wait_for(lambda: (step(cr2), _abandons(kafka_broker, topic))[1] == [
                (run1, None, "cancelled: no longer requested", "operator")], 30, "b1 released")
            # b2's application fails for good (after its retries): released with the reason.
            plane.kubectl("patch", "sparkapplication", f"{prefix}-bf-b2", "--subresource=status", "-n", NS, "--type=merge", "-p", json.dumps(
                {"status": {"driverInfo": {}, "applicationState": {"state": "FAILED", "errorMessage": "driver lost"},
                            "terminationTime": NOW}}), check=True)
            wait_for(lambda: (step(cr2), _abandons(kafka_broker, topic))[1][1:] == [
                (run2, None, "failed: driver lost", "operator")], 30, "b2 released")
            assert step(cr2)["b2"]["phase"] == "Failed"
            # Once each, whatever the number of reconciles (read back as above).
            _write(kafka_broker, topic, [ChunkDone(Chunk(run2, "commerce", "-80", "orders", 1, ("id",), (5,), (9,)),
                                                   10, "l", "h")])
            wait_for(lambda: step(cr2)["b2"].get("chunksDone") == 2, 30, "b2's second chunk counted")
            assert [a[0] for a in _abandons(kafka_broker, topic)] == [run1, run2]
        finally:
            feeds.close()
