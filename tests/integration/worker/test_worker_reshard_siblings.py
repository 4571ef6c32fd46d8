"""A task holding several source shards of one reshard reads each up to its own journal.

MERGE: a 4 -> 2 merge whose source shards are spread over two tasks; task 0 holds -40 and 40-80.
VTGate sends each shard's journal as that shard's stream reaches it and then ends the stream ("not
all journaling participants are in the stream"). The test server's ``lag_shards`` holds 40-80's
tablet stream back while its last changes before the cut-over are still unsent, so -40 delivers
the journal first. The worker must keep streaming 40-80 (without -40, whose stored position stays
before its journal) until 40-80 delivers the same journal, and only then store the journal's
target positions and exit for reassignment. Killed in between, the restarted worker reads -40's
journal again and loses nothing.

SPLIT: a 2 -> 4 split, one task holding both source shards: VTGate holds -80's stream at its
journal until 80- reaches its own (no error, no reconnect); the worker streams 80- on meanwhile.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from worker_fixtures import RunningTask, running_task, wait_for, worker_config, worker_properties

from cdcoperator.local.children import start_bound
from cdcoperator.local.ports import free_port
from cdcworker import exitcodes, keyrange
from cdcworker.config import WorkerConfig
from cdcworker.offsets import OffsetPartition, OffsetValue, offset_record_key
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import compare, materialise
from vtgatesim import FaultPlan, VTGateSim

KS = "commerce"
DDL = "CREATE TABLE customer (id BIGINT NOT NULL, email VARCHAR(128), PRIMARY KEY (id))"
EXACTLY_ONCE = {"exactly.once.support": "required", "poll.interval.ms": "100"}


@dataclass(frozen=True)
class Layout:
    old: list[str]
    new: list[str]
    tasks: int  # task 0 holds ``held``: the first source shard delivers its journal, the second lags
    held: list[str]

    @property
    def done(self) -> str:
        return self.held[0]

    @property
    def lagging(self) -> str:
        return self.held[1]

    def task(self) -> dict[str, str]:
        return {"vitess.offset.storage.per.task": "true", "tasks.max": str(self.tasks),
                "shardcdc.task.id": "0", "shardcdc.task.count": str(self.tasks), "shardcdc.task.generation": "0",
                "shardcdc.task.shards": ",".join(self.held), "shardcdc.task.prev.count": "1"}

    def shard_of(self, i: int) -> str:
        return keyrange.shard_for_keyspace_id(self.old, keyrange.hash_keyspace_id(i))


MERGE = Layout(["-40", "40-80", "80-c0", "c0-"], ["-80", "80-"], 2, ["-40", "40-80"])  # task 1: 80-c0, c0-
SPLIT = Layout(["-80", "80-"], ["-40", "40-80", "80-c0", "c0-"], 1, ["-80", "80-"])


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with VTGateSim() as s:
        yield s


def _insert(sim: VTGateSim, ids: range) -> None:
    for i in ids:
        sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}')", KS)


def _offsets(broker: KafkaBroker, cfg: WorkerConfig, read_committed: bool) -> list[dict[str, str]]:
    """Every offset record task 0 wrote, oldest first, as {shard: gtid}."""
    key = offset_record_key(cfg.name, OffsetPartition.for_task(cfg.topic_prefix, 0, cfg.task.task_count, 0))
    records = consume_all(broker.bootstrap, cfg.kafka.offsets_topic, read_committed)
    return [{sg.shard: sg.gtid for sg in OffsetValue.from_bytes(r.value or b"").vgtid} for r in records if r.key == key]


def _n(gtid: str) -> int:
    """N of ``MySQL56/<uuid>:1-N``."""
    return int(gtid.rsplit(":", 1)[1].rsplit("-", 1)[-1])


def _streamed_once(sim: VTGateSim, layout: Layout, cfg: WorkerConfig) -> None:
    """Stream from the current positions, take some changes of the held shards, stop cleanly."""
    sim.create_keyspace(KS, layout.old, ddl=[DDL])
    with running_task(cfg) as run:
        wait_for(lambda: _at(run, layout, sim.positions(KS)), what="the stream positioned at the heads")
        _insert(sim, range(1, 13))
        wait_for(lambda: _at(run, layout, sim.positions(KS)), what="the first changes")
        assert run.stop().exit_code == exitcodes.OK


def _at(run: RunningTask, layout: Layout, heads: dict[str, str]) -> bool:
    proc, sink = run.task.processor, run.task.sink
    if proc is None or sink is None or sink.pending:
        return False
    return {sg.shard: sg.gtid for sg in proc.position} == {s: heads[s] for s in layout.held}


def _reshard_with_changes_pending(sim: VTGateSim, layout: Layout) -> tuple[dict[str, str], Any]:
    """Changes on every old shard while the worker is down, the reshard, changes after it.
    Returns the old shards' heads before their journals and the journal."""
    _insert(sim, range(13, 41))
    pending = [i for i in range(13, 41) if layout.shard_of(i) == layout.lagging]
    assert len(pending) >= 3 and any(layout.shard_of(i) == layout.done for i in range(13, 41)), pending
    sim.execute(f"UPDATE customer SET email = 'late' WHERE id = {pending[0]}", KS)
    sim.execute(f"DELETE FROM customer WHERE id = {pending[1]}", KS)
    heads = sim.positions(KS)
    journal = sim.reshard(KS, layout.new)
    assert sorted(p.shard for p in journal.participants) == sorted(layout.old)
    _insert(sim, range(41, 51))  # on the new shards: the next generation's
    return heads, journal


def _assert_topic(broker: KafkaBroker, cfg: WorkerConfig, sim: VTGateSim, layout: Layout, eos: bool,
                  exact: bool) -> None:
    """Every change of the held shards made before the cut-over, and nothing else: exactly once
    (``exact``), or each at least once with nothing missing (at-least-once after a kill)."""
    topic = f"{cfg.topic_prefix}.{KS}.customer"
    records = consume_all(broker.bootstrap, topic, eos)
    changes = []
    for r in records:
        if r.value is not None:
            p = json.loads(r.value)["payload"]
            changes.append((p["source"]["shard"], p["op"], (p["after"] or p["before"])["id"]))
    ours = [i for i in range(1, 41) if layout.shard_of(i) in layout.held]
    lagging = [i for i in ours if i > 12 and layout.shard_of(i) == layout.lagging]
    expected = sorted([(layout.shard_of(i), "c", i) for i in ours]
                      + [(layout.lagging, "u", lagging[0]), (layout.lagging, "d", lagging[1])])
    if exact:
        assert sorted(changes) == expected
    else:
        assert sorted(set(changes)) == expected
    truth = [row for row in sim.source_truth(KS, "customer") if int(row["id"] or b"0") in ours]
    diff = compare(materialise(records), truth, "id", ["id", "email"])
    assert diff.empty, diff.summary()


def _assert_reassigned(broker: KafkaBroker, cfg: WorkerConfig, layout: Layout, eos: bool, heads: dict[str, str],
                       journal: Any) -> None:
    """The last stored offset is the journal's targets; every one before it stays before the
    journals on the held shards (never past data not read)."""
    stored = _offsets(broker, cfg, eos)
    assert stored[-1] == {g.shard: g.gtid for g in journal.shard_gtids}
    held = layout.held
    assert all(set(o) == set(held) and all(_n(o[s]) <= _n(heads[s]) for s in held) for o in stored[:-1]), stored


def _requested_shards(sim: VTGateSim) -> list[list[str]]:
    return [[sg.shard for sg in req.vgtid.shard_gtids] for req, _ in sim.vstream_calls]


@pytest.mark.parametrize(("layout", "eos"), [(MERGE, False), (MERGE, True), (SPLIT, False)],
                         ids=["merge-at-least-once", "merge-exactly-once", "split-one-task"])
def test_a_lagging_sibling_is_read_up_to_its_own_journal(
        sim: VTGateSim, kafka_broker: KafkaBroker, layout: Layout, eos: bool) -> None:
    cfg = worker_config(kafka_broker, sim.address, KS, extra={**layout.task(), **(EXACTLY_ONCE if eos else {})})
    _streamed_once(sim, layout, cfg)
    heads, journal = _reshard_with_changes_pending(sim, layout)
    plan = sim.inject(FaultPlan(lag_shards=(layout.lagging,)), next_stream=False)
    calls = len(sim.vstream_calls)
    # MERGE: VTGate ends the stream after the first journal; the worker streams the lagging shard
    # alone. SPLIT: every participant is in the stream, VTGate holds the first one at its journal.
    requests = [layout.held] if layout.tasks == 1 else [layout.held, [layout.lagging]]
    with running_task(cfg) as run:
        wait_for(lambda: _awaiting(run) and _requested_shards(sim)[calls:] == requests,
                 what=f"the worker waiting for {layout.lagging}'s journal")
        tm = run.task.metrics
        assert tm is not None and run.result is None
        assert tm.status()["awaitingJournal"] == {"id": str(journal.id), "done": [layout.done],
                                                  "pending": [layout.lagging]}
        plan.release_lag()
        result = run.wait(60)
    assert result.exit_code == exitcodes.REASSIGNMENT_NEEDED, result
    assert _requested_shards(sim)[calls:] == requests
    _assert_reassigned(kafka_broker, cfg, layout, eos, heads, journal)
    _assert_topic(kafka_broker, cfg, sim, layout, eos, exact=True)


def _awaiting(run: RunningTask) -> bool:
    tm = run.task.metrics
    if run.result is not None:  # not an AssertionError: wait_for must not wait this out
        raise RuntimeError(f"the worker ended instead of waiting: {run.result}")
    return tm is not None and tm.awaiting_journal is not None


@pytest.mark.parametrize("eos", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_kill_between_the_journals_loses_nothing(
        sim: VTGateSim, kafka_broker: KafkaBroker, eos: bool, tmp_path: Path) -> None:
    layout = MERGE
    extra = {**layout.task(), **(EXACTLY_ONCE if eos else {})}
    props = worker_properties(kafka_broker, sim.address, KS, extra=extra)
    cfg = worker_config(kafka_broker, sim.address, KS, prefix=props["topic.prefix"], extra=extra)
    _streamed_once(sim, layout, cfg)
    heads, journal = _reshard_with_changes_pending(sim, layout)
    plan = sim.inject(FaultPlan(lag_shards=(layout.lagging,)), next_stream=False)
    port = free_port()
    config, log = tmp_path / "worker.properties", tmp_path / "worker.log"
    config.write_text("".join(f"{k}={v}\n" for k, v in {**props, "shardcdc.metrics.port": str(port)}.items()))
    with log.open("ab") as out:
        proc = start_bound([sys.executable, "-m", "shardcdc_cli.cli", "worker", "-c", str(config)],
                           stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "SHARDCDC_LOG_LEVEL": "INFO"})
    try:
        # Killed while waiting for 40-80's journal, once -40's last position before its journal
        # is stored: the restart must read that journal again, not stream -40 past it.
        wait_for(lambda: _waiting_with_done_stored(proc, port, log, kafka_broker, cfg, eos, heads),
                 what="the worker waiting for 40-80's journal with -40's position stored", timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert "reshard journal" in log.read_text() and "streaming commerce/40-80 until each reaches it" in log.read_text()
    plan.release_lag()
    calls = len(sim.vstream_calls)
    with running_task(cfg) as run:
        result = run.wait(60)
    assert result.exit_code == exitcodes.REASSIGNMENT_NEEDED, result
    # The restart read -40 from its position before the journal (and the journal again).
    restart = sim.vstream_calls[calls][0].vgtid.shard_gtids
    assert {sg.shard: sg.gtid for sg in restart}["-40"] == heads["-40"]
    _assert_reassigned(kafka_broker, cfg, layout, eos, heads, journal)
    _assert_topic(kafka_broker, cfg, sim, layout, eos, exact=eos)


def _waiting_with_done_stored(proc: subprocess.Popen[bytes], port: int, log: Path, broker: KafkaBroker,
                              cfg: WorkerConfig, eos: bool, heads: dict[str, str]) -> bool:
    if proc.poll() is not None:  # not an AssertionError: wait_for must not wait this out
        raise RuntimeError(f"worker exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as resp:
            doc = json.loads(resp.read())
    except OSError:
        return False
    if (doc.get("awaitingJournal") or {}).get("pending") != [MERGE.lagging]:
        return False
    stored = _offsets(broker, cfg, eos)
    return bool(stored) and stored[-1].get("-40") == heads["-40"]
