"""Real ``Reshard`` workflows of keyspace ``customer`` on a multi-process Vitess v24 cluster: a split
2 -> 4 shards, then a merge back 4 -> 2 (``create``, ``SwitchTraffic``, ``complete``), while local mode
(``shardcdc run``, 2 tasks) streams it under a workload. After each switch the workers follow the
journal, local mode starts the next generation over the new shards, the topic equals the source (no
duplicate), and the operator's discovery sees exactly the new shards."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_mode_fixtures import Run, control, ready
from polling import wait_for
from realvitess_fixtures import TABLE_DDL, Writer, topic_equals_source

from cdcoperator.discovery import discover_via_vtctld
from localkafka import KafkaBroker
from realvitess.client import VTGateError
from realvitess.cluster import VitessCluster
from realvitess.single import hash_vschema

pytestmark = pytest.mark.realvitess

KS, TABLE = "customer", "items"
TARGETS = ["-40", "40-80", "80-c0", "c0-"]
# A split 2 -> 4, then a merge back 4 -> 2 (new tablets for -80 and 80-: the old shards are gone).
PLAN = [("split", ["-80", "80-"], TARGETS), ("merge", TARGETS, ["-80", "80-"])]
STEP = 180.0


@contextlib.contextmanager
def _workload(writer: Writer) -> Iterator[None]:
    """Writes in a thread while the block runs. Writes refused while traffic switches are skipped:
    the source truth is read at the end."""
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            with contextlib.suppress(VTGateError):
                writer.step()
            stop.wait(0.05)  # pacing the workload, not synchronisation

    thread = threading.Thread(target=work, name="workload", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def _switch_traffic(vt: VitessCluster, workflow: str, timeout: float = 300.0) -> None:
    """SwitchTraffic once the copy is done (vtctldclient refuses it while the workflow copies or lags)."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            vt.vtctldclient("Reshard", "--workflow", workflow, "--target-keyspace", KS, "SwitchTraffic")
            return
        except RuntimeError as exc:
            last = str(exc)[-500:]
        time.sleep(2)  # polling the workflow's state with a deadline
    raise AssertionError(f"SwitchTraffic not accepted within {timeout}s: {last}")


def test_split_2_to_4_then_merge_back_are_followed_by_local_mode(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    prefix, state = f"rr{uuid.uuid4().hex[:6]}", tmp_path / "state"
    with VitessCluster(KS, ["-80", "80-"], [TABLE_DDL.format(t=TABLE)], hash_vschema([TABLE])) as vt:
        client = vt.client()
        writer = Writer(client, TABLE, seed=3, keyspace=KS)
        writer.insert(40)
        manifest = tmp_path / "connector.yaml"
        manifest.write_text(f"""\
apiVersion: shardcdc.io/v1alpha1
kind: CdcConnector
metadata:
  name: cust
spec:
  source:
    vitess:
      vtgate: "{vt.vtgate}"
      keyspace: {KS}
  kafka:
    bootstrapServers: "{kafka_broker.bootstrap}"
    topicPrefix: {prefix}
    offsetsTopic: {prefix}-offsets
  tasks: 2
  config:
    offset.storage.replication.factor: "1"
    offset.flush.interval.ms: "200"
""")
        run = Run(manifest, state, tmp_path / "run.log")
        try:
            ctl = wait_for(lambda: run.alive() or control(state, "cust"), STEP, "the control endpoint")
            wait_for(lambda: ready(ctl, 0, 2, 2), STEP, "generation 0 streaming 2 shards")
            for generation, (workflow, sources, targets) in enumerate(PLAN, start=1):
                with _workload(writer):
                    vt.add_shards(targets)
                    vt.vtctldclient("Reshard", "--workflow", workflow, "--target-keyspace", KS, "create",
                                    "--source-shards", ",".join(sources), "--target-shards", ",".join(targets),
                                    "--tablet-types", "PRIMARY")
                    _switch_traffic(vt, workflow)
                    a = wait_for(lambda g=generation, t=targets: ready(ctl, g, 2, len(t)), STEP,
                                 f"generation {generation} over {targets}")
                    assert sorted(s for t in a["taskStates"] for s in t["shards"]) == sorted(targets)
                writer.run(10)  # after the switch, on the new shards
                materialised = topic_equals_source(kafka_broker, client, prefix, TABLE, keyspace=KS, timeout=STEP)
                # The workflow ends: the source shards go; the operator's discovery sees the new ones.
                vt.vtctldclient("Reshard", "--workflow", workflow, "--target-keyspace", KS, "complete")
                found = discover_via_vtctld(vt.vtctld, KS)
                assert (found.serving, found.discovered) == (tuple(targets), tuple(targets))
                for shard in sources:  # their tablets would register the removed shards again
                    vt.stop_tablet(shard)
        finally:
            run.stop()
            client.close()
    assert "generation 1 started: 2 tasks over 4 shards" in run.output()
    assert "generation 2 started: 2 tasks over 2 shards" in run.output()
    assert materialised.applied > 40 and materialised.duplicates == 0
