"""``shardcdc status --local`` and ``shardcdc offsets reset|set --local`` against a running ``shardcdc run``.

A real ``shardcdc run`` process (worker processes, a real broker, the VTGate test server) is asked
through its control endpoint (``control.json`` under the state directory, as ``shardcdc scale``
does): ``status`` shows the generation and assignment in the cluster view's table, and the offsets
commands refuse (exit code 3, as in a cluster) until ``spec.state: stopped`` has been observed and
every worker has exited, or ``shardcdc run`` itself is gone. Offsets are read back from the topic.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from local_mode_fixtures import Run, control, positions, ready, shardcdc
from polling import wait_for

from cdcoperator.local.control import ControlClient
from cdcoperator.offsets import LOCAL_STOP
from cdcworker.offsets import OffsetValue
from cdcworker.offsets.edits import entries
from cdcworker.offsets.store import OffsetStore
from kubetest.controlplane import free_port
from localkafka import KafkaBroker
from shardcdc_cli import cli
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

STEP = 60.0


@dataclass
class Local:
    run: Run
    client: ControlClient
    state: Path
    sim: VTGateSim
    broker: KafkaBroker
    offsets_topic: str

    def offsets(self) -> dict[bytes, bytes]:
        with OffsetStore({"bootstrap.servers": self.broker.bootstrap}, self.offsets_topic) as store:
            return store.load()

    def kafka_args(self) -> tuple[str, ...]:
        return ("--local", "--state-dir", str(self.state), "--bootstrap-servers", self.broker.bootstrap,
                "--offsets-topic", self.offsets_topic)


@pytest.fixture
def local(tmp_path: Path, kafka_broker: KafkaBroker, monkeypatch: pytest.MonkeyPatch) -> Iterator[Local]:
    """``shardcdc run`` of connector default/shop (1 task, 2 shards), streaming and caught up."""
    monkeypatch.setenv("COLUMNS", "250")  # one line per table row
    prefix = f"lc{uuid.uuid4().hex[:6]}"
    with VTGateSim() as sim:
        sim.create_keyspace("shop", ["-80", "80-"])
        workload = Workload(sim, "shop", table="items", seed=3)
        workload.ensure_table()
        workload.run(transactions=20)
        manifest = tmp_path / "connector.yaml"
        manifest.write_text(json.dumps({
            "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": "shop"},
            "spec": {"source": {"vitess": {"vtgate": sim.address, "keyspace": "shop"}},
                     "kafka": {"bootstrapServers": kafka_broker.bootstrap, "topicPrefix": prefix,
                               "offsetsTopic": f"{prefix}-offsets"},
                     "tasks": 1,
                     "config": {"offset.storage.replication.factor": "1", "offset.flush.interval.ms": "200"}}}))
        state = tmp_path / "state"
        run = Run(manifest, state, tmp_path / "run.log")
        try:
            client = wait_for(lambda: run.alive() or control(state, "shop"), STEP, "the control endpoint")
            wait_for(lambda: ready(client, 0, 1, 2), STEP, "generation 0 streaming")
            final = sim.positions("shop")
            wait_for(lambda: positions(client) == final, STEP, "the task at the source's positions")
            yield Local(run, client, state, sim, kafka_broker, f"{prefix}-offsets")
        finally:
            run.stop()


def shardcdc_in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def head(out: str) -> dict[str, str]:
    """The key/value grid above the task table: first word -> the rest of the line."""
    rows = {}
    for line in out.splitlines():
        if line and line[0].isalpha():
            key, _, value = line.partition(" ")
            rows[key] = value.strip()
    return rows


def task_rows(out: str) -> list[list[str]]:
    """The task table's body rows, cell by cell."""
    return [[c.strip() for c in line.strip().strip("│").split("│")] for line in out.splitlines()
            if line.startswith("│")]


def expected_rows(body: dict[str, Any]) -> list[list[str]]:
    """The task table as the status table shows ``body``'s assignment ("-" for what is not known yet)."""
    return [[str(t["id"]), ", ".join(t["shards"]), t["phase"], t["pod"], t.get("position") or "-", t.get("lag") or "-"]
            for t in body["status"]["assignment"]["taskStates"]]


def test_status_local_shows_generation_and_assignment(local: Local, capsys: Any) -> None:
    state = str(local.state)
    rc, out, err = shardcdc_in_process(capsys, "status", "shop", "--local", "--state-dir", state)
    assert (rc, err) == (0, "")
    rows = head(out)
    assert rows["connector"] == "default/shop"
    assert rows["source"] == f"local mode: `shardcdc run` at {local.client.url}"
    assert rows["state"] == "running (spec.tasks 1)"
    assert rows["ready"] == "True AllTasksStreaming: 1 tasks streaming 2 shards in generation 0"
    assert rows["generation"] == "0 (Running; previous tasks -1)"
    assert rows["shards"] == "-80, 80- (2 serving)"
    rendered = task_rows(out)
    assert [r[:4] for r in rendered] == [["0", "-80, 80-", "Streaming", "shop-g0-t0-0"]]
    assert rendered == expected_rows(local.client.get())
    # Every connector of the namespace (here the one) when no name is given; JSON for scripts.
    rc, out_all, _ = shardcdc_in_process(capsys, "status", "--local", "--state-dir", state)
    assert rc == 0 and head(out_all)["connector"] == "default/shop"
    rc, out, _ = shardcdc_in_process(capsys, "status", "shop", "--local", "--state-dir", state, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["local"] == [{"namespace": "default", "name": "shop", "running": True,
                                         "source": local.client.url}]
    assert doc["items"][0]["status"]["assignment"]["generation"] == 0

    # After `shardcdc scale`, the next generation and its assignment.
    r = shardcdc("scale", "shop", "--tasks", "2", "--state-dir", state)
    assert r.returncode == 0, r.stderr
    wait_for(lambda: ready(local.client, 1, 2, 2), STEP, "generation 1 with 2 tasks")
    final = local.sim.positions("shop")
    wait_for(lambda: positions(local.client) == final, STEP, "generation 1 at the source's positions")
    rc, out, _ = shardcdc_in_process(capsys, "status", "shop", "--local", "--state-dir", state)
    assert rc == 0
    assert head(out)["generation"] == "1 (Running; previous tasks 1)"
    assert head(out)["state"] == "running (spec.tasks 2)"
    rendered = task_rows(out)
    assert [r[:4] for r in rendered] == [["0", "-80", "Streaming", "shop-g1-t0-0"],
                                         ["1", "80-", "Streaming", "shop-g1-t1-0"]]
    assert rendered == expected_rows(local.client.get())

    rc, _, err = shardcdc_in_process(capsys, "status", "nope", "--local", "--state-dir", state)
    assert rc == 2 and err == f"shardcdc status: no local-mode default/nope under {state} (no `shardcdc run` state)\n"

    # `shardcdc run` gone: the saved status, said to be stale, and not Ready (exit code 1).
    assert local.run.stop() == 0
    saved = json.loads((local.state / "default" / "shop" / "connector.json").read_text())
    rc, out, _ = shardcdc_in_process(capsys, "status", "shop", "--local", "--state-dir", state)
    assert rc == 1
    rows = head(out)
    assert rows["source"] == f"local mode: not running (status as last saved in {state}/default/shop/connector.json)"
    assert rows["generation"] == "1 (Running; previous tasks 1)"
    assert task_rows(out) == expected_rows(saved)


RESET_NOTE = ("the generation record was cleared with the offsets: when running again the connector starts over "
              "at generation 0 as snapshot.mode says")


def test_offsets_local_refused_until_stopped(local: Local, capsys: Any) -> None:
    final = local.sim.positions("shop")

    def stored_at_the_source() -> bool:
        # The fixture saw the worker *read* to the source's positions; its stored record follows
        # within the flush interval, and one written after ``before`` would fail the comparison
        # below (CI: a record of the copy's start, then the caught-up one).
        found = entries(local.offsets(), "shop")
        return [e.partition.task_key for e in found] == ["task0_1_0"] and \
            {sg.shard: sg.gtid for sg in OffsetValue.from_bytes(found[0].value).vgtid} == final

    wait_for(stored_at_the_source, STEP, "the task's offsets record at the source's positions")
    before = local.offsets()
    refused = ("refusing to change the offsets of default/shop: spec.state is 'running'; "
               f"{LOCAL_STOP}\n")
    rc, out, err = shardcdc_in_process(capsys, "offsets", "reset", "shop", *local.kafka_args(), "--yes")
    assert (rc, out, err) == (3, "", refused)
    rc, _, err = shardcdc_in_process(capsys, "offsets", "set", "shop", *local.kafka_args(), "--yes",
                                     "--shard=-80=MySQL56/aaaaaaaa-0000-0000-0000-000000000001:1-10")
    assert (rc, err) == (3, refused)
    assert local.offsets() == before

    # spec.state: stopped through the control endpoint (as a re-applied manifest would set it).
    local.client.patch({"spec": {"state": "stopped"}})
    # Phase Stopped comes at once; stoppedCleanly once every worker exited (the offsets tools wait for both).
    wait_for(lambda: ((local.client.get().get("status") or {}).get("assignment") or {}).items()
             >= {"phase": "Stopped", "stoppedCleanly": True}.items(), STEP, "every worker exited")
    stopped = local.offsets()
    assert [e.partition.task_key for e in entries(stopped, "shop")] == ["task0_1_0"]
    rc, out, err = shardcdc_in_process(capsys, "offsets", "reset", "shop", *local.kafka_args(), "--yes")
    assert (rc, err) == (0, "")
    assert out.splitlines()[-2:] == ["wrote 1 records", RESET_NOTE]
    assert entries(local.offsets(), "shop") == []
    # The generation record went with the offsets (through the control endpoint): running again
    # starts over at generation 0 instead of looking for the deleted keys.
    status = local.client.get().get("status") or {}
    assert "assignment" not in status and "adoptedOffsets" not in status


def test_offsets_local_without_a_running_instance(local: Local, capsys: Any, tmp_path: Path) -> None:
    assert local.run.stop() == 0
    state = str(local.state)
    # No instance runs, so no worker: allowed, and said so.
    rc, out, err = shardcdc_in_process(capsys, "offsets", "reset", "shop", *local.kafka_args(), "--yes")
    assert rc == 0
    assert err == (f"`shardcdc run` for default/shop is not running (state in {state}/default/shop/connector.json): "
                   "no worker of it runs\n")
    assert out.splitlines()[-2:] == ["wrote 1 records", RESET_NOTE] and entries(local.offsets(), "shop") == []
    saved = json.loads((local.state / "default" / "shop" / "connector.json").read_text())
    assert "assignment" not in saved["status"] and saved["spec"]["kafka"]["offsetsTopic"] == local.offsets_topic

    # A control.json left by a killed instance: stale when its process is gone...
    control_file = local.state / "default" / "shop" / "control.json"
    dead = {"url": f"http://127.0.0.1:{free_port()}", "token": "t", "pid": 2**22 + 1,
            "namespace": "default", "name": "shop"}
    control_file.write_text(json.dumps(dead))
    rc, _, err = shardcdc_in_process(capsys, "offsets", "reset", "shop", *local.kafka_args(), "--yes")
    assert rc == 0 and "is not running" in err
    # ...but a live process that does not answer may still have workers: refused, as is status.
    control_file.write_text(json.dumps({**dead, "pid": os.getpid()}))
    rc, _, err = shardcdc_in_process(capsys, "offsets", "reset", "shop", *local.kafka_args(), "--yes")
    assert rc == 3
    assert err.startswith(f"refusing to change the offsets of default/shop: `shardcdc run` for default/shop runs "
                          f"(pid {os.getpid()}) but does not answer: cannot reach `shardcdc run` for default/shop at "
                          f"{dead['url']}: ")
    rc, _, err = shardcdc_in_process(capsys, "status", "shop", "--local", "--state-dir", state)
    assert rc == 2 and "runs (pid" in err
    control_file.unlink()

    # A connector `shardcdc run` never ran under this state directory: nothing shows it stopped.
    rc, _, err = shardcdc_in_process(capsys, "offsets", "reset", "other", *local.kafka_args(), "--yes")
    assert (rc, err) == (3, f"refusing to change the offsets of default/other: no `shardcdc run` state of it under "
                            f"{state}, so nothing shows it is stopped; give the --state-dir of its `shardcdc run`, "
                            "or --force-offline if no worker of it runs anywhere\n")
