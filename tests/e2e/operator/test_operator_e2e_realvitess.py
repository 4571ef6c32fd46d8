"""End to end on real Vitess: the operator on a real kube-apiserver follows a ``Reshard`` there and back.

The multi-process Vitess v24 cluster (devkit/realvitess/cluster.py: etcd, vtctld, vtgate, one
vttablet + mariadbd per shard), keyspace ``customer`` over ``-80, 80-``. A CdcConnector with 2 tasks
(the operator in this process, its worker Deployments run as real ``shardcdc worker`` processes by
``ApiKubelet``, tests/operator_e2e_fixtures.py) streams it under a workload while a ``Reshard``
workflow splits it into 4 shards and:

1. ``SwitchTraffic``: the workers stop at the journal on the source shards, the operator starts
   generation 1 over the 4 new shards;
2. ``ReverseTraffic``: traffic goes back to the source shards; the reverse workflow's journal is
   written on the 4 new shards (its sources), the workers of generation 1 stop at it and the
   operator starts generation 2 over the old shards again;
3. ``SwitchTraffic`` again (a new forward journal on the old shards): generation 3 over the 4 new
   shards; then ``complete``.

The topic equals the source at the end, no record twice, per-key order kept, and two generations
never ran at once. The local-mode split and merge are tests/integration/worker/test_realvitess_cluster.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from operator_e2e_fixtures import Cluster, operator_cluster, worker_logs
from polling import eventually, wait_for
from realvitess_fixtures import (
    TABLE_DDL,
    Writer,
    per_key_order_kept,
    records,
    reshard_create,
    switch_traffic,
    topic_equals_source,
    workload,
)

from cdcoperator.discovery import discover_via_vtctld
from localkafka import KafkaBroker
from realvitess.cluster import VitessCluster
from realvitess.single import hash_vschema

pytestmark = pytest.mark.realvitess

NS, NAME = "rv", "cust"
KS, TABLE, WORKFLOW = "customer", "items", "split"
SOURCES, TARGETS = ["-80", "80-"], ["-40", "40-80", "80-c0", "c0-"]
STEP = 180.0


@pytest.fixture(scope="module")
def vt() -> Iterator[VitessCluster]:
    with VitessCluster(KS, SOURCES, [TABLE_DDL.format(t=TABLE)], hash_vschema([TABLE])) as c:
        yield c


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from operator_cluster(tmp_path_factory, NS)


def _connector(vt: VitessCluster, bootstrap: str, prefix: str) -> dict[str, Any]:
    return {
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
        "metadata": {"name": NAME, "namespace": NS},
        "spec": {
            "source": {"vitess": {"vtgate": vt.vtgate, "keyspace": KS, "vtctld": vt.vtctld}},
            "kafka": {"bootstrapServers": bootstrap, "topicPrefix": prefix, "offsetsTopic": f"{prefix}-offsets"},
            "tasks": 2,
            "config": {"offset.storage.replication.factor": "1", "offset.flush.interval.ms": "200"},
        },
    }


def _generation(cluster: Cluster, generation: int, shards: list[str]) -> dict[str, Any]:
    """Generation ``generation`` Ready over ``shards`` (2 tasks), its Deployments the only ones."""
    a = wait_for(lambda: cluster.ready(NAME, generation, 2, len(shards)), STEP,
                 f"generation {generation} over {shards}")
    assert sorted(s for t in a["taskStates"] for s in t["shards"]) == sorted(shards)
    wait_for(lambda: sorted(cluster.deployments(NAME)) == [f"{NAME}-g{generation}-t0", f"{NAME}-g{generation}-t1"],
             STEP, f"only generation {generation}'s Deployments")
    return dict(a)


def test_operator_follows_switch_reverse_and_switch_again(
    vt: VitessCluster, cluster: Cluster, kafka_broker: KafkaBroker
) -> None:
    prefix = f"rvop{uuid.uuid4().hex[:6]}"
    client = vt.client()
    writer = Writer(client, TABLE, seed=5, keyspace=KS)
    writer.insert(40)
    workdir = cluster.kubelet.kubelet.workdir
    try:
        cluster.kubectl("apply", "-f", "-", input=json.dumps(_connector(vt, kafka_broker.bootstrap, prefix)))
        _generation(cluster, 0, SOURCES)
        with workload(writer):
            vt.add_shards(TARGETS)
            reshard_create(vt, KS, WORKFLOW, SOURCES, TARGETS)
            switch_traffic(vt, KS, WORKFLOW)
            a1 = _generation(cluster, 1, TARGETS)
            switch_traffic(vt, KS, WORKFLOW, "ReverseTraffic")
            a2 = _generation(cluster, 2, SOURCES)
            switch_traffic(vt, KS, WORKFLOW)
            a3 = _generation(cluster, 3, TARGETS)
        writer.run(10)  # after the last switch, on the new shards
        materialised = topic_equals_source(kafka_broker, client, prefix, TABLE, keyspace=KS, timeout=STEP)
        keys = per_key_order_kept(records(kafka_broker, prefix, TABLE, keyspace=KS))
        vt.vtctldclient("Reshard", "--workflow", WORKFLOW, "--target-keyspace", KS, "complete")
        found = discover_via_vtctld(vt.vtctld, KS)
        assert (found.serving, found.discovered) == (tuple(TARGETS), tuple(TARGETS))
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nevents: {cluster.events(NAME)}\n{worker_logs(workdir)}") from None
    finally:
        client.close()

    # Each switch's journal: the positions the next generation started from are on its new shards.
    for a, shards in ((a1, TARGETS), (a2, SOURCES), (a3, TARGETS)):
        assert sorted(j["shard"] for j in a["journalPositions"]) == sorted(shards), a["journalPositions"]
        assert a["previousTasks"] == 2
    assert keys > 40
    assert materialised.applied > 40 and materialised.duplicates == 0

    def started() -> None:  # kopf posts Events from a background task: they may trail the status
        assert [m for _, r, m in cluster.events(NAME) if r == "GenerationStarted"] == [
            "generation 0 started: 2 tasks over 2 shards",
            *[f"generation {g} started: 2 tasks over {n} shards (previous tasks 2; Reshard)"
              for g, n in ((1, 4), (2, 2), (3, 4))]]

    eventually(started, STEP, "the GenerationStarted events")
    seen = [g for c, g in cluster.kubelet.live_generations if c == NAME]
    assert {frozenset({g}) for g in range(4)} <= set(seen)
    assert all(len(g) == 1 for g in seen), sorted(set(seen), key=sorted)
