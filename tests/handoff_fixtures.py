"""Helpers for the real-worker hand-off tests: ``shardcdc worker`` as a restartable, killable
subprocess, readers of its offsets and of the progress topic's markers, and the per-key proof
against the shards' binlogs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from backfill_fixtures import KS, SHARDS
from confluent_kafka import Consumer, TopicPartition

from cdcoperator.local.children import start_bound
from cdcworker.backfill.gtid import covers
from cdcworker.backfill.handoff import OFFSET_FIELD, marks_for
from cdcworker.backfill.job import progress_store, worker_config
from cdcworker.backfill.progress import parse_handoff, parse_hold
from cdcworker.backfill.spec import BackfillSpec
from cdcworker.offsets import OffsetValue
from localkafka import KafkaBroker, consume_all
from shardcdc_cli.materialise import _same_value, as_text, materialise
from vtgatesim import VTGateSim

PKS = {"items": ("id",), "orders": ("id",), "lines": ("order_id", "line")}
Condition = Callable[[Mapping[str, str | None]], bool]  # a row image (column -> text) inside the run's condition


class Worker:
    """``shardcdc worker`` for one task over the 4 shards, restartable, killable."""

    def __init__(self, tmp: Path, p: dict[str, str]) -> None:
        self.config = tmp / "worker.properties"
        self.log = tmp / "worker.log"
        self.config.write_text("".join(f"{k}={v}\n" for k, v in {**p, "offset.flush.interval.ms": "50"}.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    def configure(self, changes: dict[str, str]) -> None:
        """Change properties for the next start (e.g. a new task generation)."""
        lines = [line for line in self.config.read_text().splitlines() if line.split("=", 1)[0] not in changes]
        self.config.write_text("".join(f"{line}\n" for line in lines) + "".join(f"{k}={v}\n" for k, v in changes.items()))

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = start_bound([sys.executable, "-m", "shardcdc_cli.cli", "worker", "-c", str(self.config)],
                                    stdout=out, stderr=subprocess.STDOUT, env={**os.environ})

    def alive(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"worker exited:\n{self.output()}"

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            assert self.proc.wait(60) == 0, self.output()

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


def records(broker: KafkaBroker, topic: str, timeout: float = 30.0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every committed record up to the partition's end when called (a
    one-partition topic that keeps growing: read to the end offset seen first, not to an EOF that
    may keep moving away). The consumer's position passes transaction markers, which are never
    delivered (an exactly-once worker's offsets topic has them), so it is what is compared."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"t-{uuid.uuid4()}", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    try:
        if topic not in c.list_topics(timeout=10).topics:
            return []
        tp = TopicPartition(topic, 0)
        end = c.get_watermark_offsets(tp, timeout=10)[1]
        c.assign([TopicPartition(topic, 0, 0)])
        out: list[tuple[int, bytes | None]] = []
        deadline = time.monotonic() + timeout
        while max(c.position([tp])[0].offset, out[-1][0] + 1 if out else 0) < end:
            assert time.monotonic() < deadline, f"{topic}: offset {end} not reached"
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append((msg.offset(), msg.value()))
        return out
    finally:
        c.close()


def offsets(broker: KafkaBroker, p: dict[str, str]) -> list[OffsetValue]:
    return [OffsetValue.from_bytes(v) for _, v in records(broker, p["offset.storage.topic"]) if v]


def phases(value: OffsetValue) -> set[str]:
    return {s["phase"] for s in (value.fields.get(OFFSET_FIELD) or {}).values()}


def progress(broker: KafkaBroker, p: dict[str, str]) -> list[bytes]:
    return [v for _, v in records(broker, f"{p['topic.prefix']}.backfill-progress") if v]


def handed_off(broker: KafkaBroker, p: dict[str, str], epoch: int = 0) -> set[str]:
    return {m.shard for v in progress(broker, p) if (m := parse_handoff(v)) is not None and m.epoch == epoch}


def holds(broker: KafkaBroker, p: dict[str, str], run_id: str) -> dict[str, dict[str, str]]:
    """shard -> table -> hold position, from the worker's ``HoldStarted`` markers (latest wins)."""
    out: dict[str, dict[str, str]] = {}
    for v in progress(broker, p):
        m = parse_hold(v)
        if m is not None and m.run_id == run_id:
            out[m.shard] = dict(m.hold_from)
    return out


def wait(cond: Callable[[], Any], worker: Worker, timeout: float, what: str) -> Any:
    """Poll ``cond`` until truthy while the worker is alive (fails at once if it died)."""
    deadline = time.monotonic() + timeout
    while True:
        worker.alive()
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{worker.output()}"
        time.sleep(0.05)  # polling period of a condition with a deadline


def caught_up(broker: KafkaBroker, sim: VTGateSim, p: dict[str, str]) -> bool:
    """The worker's last offset is the source's end position, without hand-off state."""
    v = offsets(broker, p)
    return bool(v) and {sg.shard: sg.gtid for sg in v[-1].vgtid} == sim.positions(KS) and OFFSET_FIELD not in v[-1].fields


def handed_off_then_flowing(broker: KafkaBroker, p: dict[str, str], worker: Worker, count: Mapping[str, int]) -> None:
    """Every shard handed the run off, then the workload ran 150 more transactions (the rejoined
    tables must flow live again; ``count`` is ``live_workload``'s)."""
    wait(lambda: handed_off(broker, p) == set(SHARDS), worker, 120, "every shard handed off")
    seen = count["transactions"]
    wait(lambda: count["transactions"] >= seen + 150, worker, 30, "more live transactions")


def live_record_of(broker: KafkaBroker, topic: str, key: str, value: Any) -> bool:
    """Whether the (one-partition) topic holds a change record whose after image has ``key`` = ``value``
    (read to its end offset when called: a topic the workload keeps writing has no stable EOF)."""
    for _, v in records(broker, topic):
        after = (json.loads(v)["payload"]["after"] or {}) if v else {}
        if str(after.get(key)) == str(value):
            return True
    return False


def _pos(gtid: str) -> str:
    """One spelling for a position (the binlog's has no flavor prefix, VStream's has)."""
    return gtid if gtid.startswith("MySQL56/") else f"MySQL56/{gtid}"


History = dict[tuple[str, ...], list[tuple[str, str, str, Any]]]


def binlog_history(sim: VTGateSim, table: str) -> History:
    """key -> [(shard, op, position, after image as {column: text})] from the shards' binlogs."""
    pk = PKS[table]
    out: History = {}
    for shard in SHARDS:
        for e in sim.topo.shard(KS, shard).binlog.entries:
            for ev in e.rows:
                if ev.schema.name != table:
                    continue
                cols = [c.name for c in ev.schema.columns]
                idx = [cols.index(c) for c in pk]
                for before, after in ev.changes:
                    bk = tuple(before[i].decode() for i in idx) if before is not None else None  # type: ignore[union-attr]
                    ak = tuple(after[i].decode() for i in idx) if after is not None else None  # type: ignore[union-attr]
                    img = {c: (v.decode() if v is not None else None) for c, v in zip(cols, after, strict=True)} if after else None
                    if bk is not None and bk != ak:
                        out.setdefault(bk, []).append((shard, "d", _pos(e.position), None))
                    if ak is not None:
                        out.setdefault(ak, []).append((shard, "c" if bk != ak else "u", _pos(e.position), img))
    return out


def _same_row(image: Mapping[str, str | None], after: Mapping[str, Any]) -> bool:
    return all(_same_value(v, as_text(after.get(c))) for c, v in image.items())


def topic_history(broker: KafkaBroker, p: dict[str, str], table: str, read_committed: bool = False
                  ) -> dict[tuple[str, ...], list[tuple[str, str, Any]]]:
    """key -> [(op, position, after)] in topic order (tombstones dropped)."""
    out: dict[tuple[str, ...], list[tuple[str, str, Any]]] = {}
    for r in consume_all(broker.bootstrap, f"{p['topic.prefix']}.{KS}.{table}", read_committed=read_committed):
        if r.value is None:
            continue  # tombstones follow deletes
        key = json.loads(r.key)["payload"]
        v = json.loads(r.value)["payload"]
        shard = v["source"]["shard"]
        gtid = next(sg["gtid"] for sg in json.loads(v["source"]["vgtid"]) if sg["shard"] == shard)
        out.setdefault(tuple(str(key[c]) for c in PKS[table]), []).append((v["op"], _pos(gtid), v["after"]))
    return out


def assert_per_key_sequences(broker: KafkaBroker, sim: VTGateSim, p: dict[str, str], spec: BackfillSpec,
                             replays: bool, tables: tuple[str, ...] = tuple(PKS), epoch: int = 0,
                             conditions: Mapping[str, Condition] | None = None,
                             read_committed: bool = False) -> dict[str, int]:
    """For every key of ``tables``, in topic order: [live changes up to the hold (a suffix of the key's
    changes up to it)] + [snapshot row at H(K), or the final delete if K is absent at H(K), or, when
    no snapshot row covers K (outside the run's condition, or its chunk was never finished), every
    change between the hold and H(K)] + [every change after H(K)], nothing else (with ``replays``:
    repeated records are dropped first). A chunk the run did not finish is marked at the hold
    (``marks_for``). Returns counts of the kinds of keys seen."""
    run = progress_store(spec, worker_config(spec)).load(spec.run_id)
    held = holds(broker, p, spec.run_id)
    counts = {"keys": 0, "snapshot": 0, "final_delete": 0, "live_then_snapshot": 0, "after_high": 0, "live": 0,
              "uncovered": 0, "unfinished": 0, "unfinished_changed": 0}
    for table in tables:
        cond = (conditions or {}).get(table)
        marks = {s: marks_for(run, s, table, epoch, held[s][table]) for s in SHARDS}
        history = binlog_history(sim, table)
        topic = topic_history(broker, p, table, read_committed)
        for key in set(history) | set(topic):
            counts["keys"] += 1
            changes = history.get(key, [])
            shards = {c[0] for c in changes}
            assert len(shards) == 1, f"{table} {key}: on shards {shards}"
            shard = shards.pop()
            mark = marks[shard].mark_for(tuple(int(k) for k in key))
            high, low, hold = _pos(mark.high), _pos(mark.low) if mark.low else "", _pos(held[shard][table])
            got = topic.get(key, [])
            where = f"{table} {key} (hold {hold}, low {low}, high {high}):\n  got {[(o, g) for o, g, _ in got]}\n  " \
                    f"source {[(o, pos) for _, o, pos, _ in changes]}"
            live = [(o, g) for o, g, _ in got if o != "r" and covers(hold, g)]
            post = [(o, g, a) for o, g, a in got if o == "r" or not covers(hold, g)]
            counts["live"] += len(live)
            # No live record after the snapshot row (or the final delete): live ones come first.
            assert [(o, g) for o, g, _ in got[:len(live)]] == live, where
            before_hold = [(o, pos) for _, o, pos, _ in changes if covers(hold, pos)]
            assert not live or before_hold[len(before_hold) - len(live):] == live, where
            at_high = [c for c in changes if covers(high, c[2])]
            during = [(o, pos) for _, o, pos, _ in at_high if not covers(hold, pos)]  # (hold, H]
            state = at_high[-1][3] if at_high else None
            snapshot: Any = None
            want: list[tuple[str, str]] = []
            after = [(o, pos) for _, o, pos, _ in changes if not covers(high, pos)]
            if not low:
                counts["unfinished"] += 1  # no snapshot row: every change after the hold
                counts["unfinished_changed"] += bool(after)
            elif state is not None and (cond is None or cond(state) or (during and not covers(low, during[-1][1]))):
                want.append(("r", high))
                snapshot = state
                counts["snapshot"] += 1
                counts["live_then_snapshot"] += bool(live)
            elif state is not None:
                want += during  # outside the condition at H(K): no snapshot row
                counts["uncovered"] += bool(during)
            elif during:
                want.append(during[-1])  # absent at H(K): its final delete
                counts["final_delete"] += 1
            counts["after_high"] += bool(after)
            want += after
            if replays:
                seen: set[tuple[str, str]] = set()
                post = [x for x in post if (x[0], x[1]) not in seen and not seen.add((x[0], x[1]))]  # type: ignore[func-returns-value]
            assert [(o, g) for o, g, _ in post] == want, where
            if snapshot is not None:
                assert _same_row(snapshot, post[0][2]), f"{where}\n  snapshot {post[0][2]} != {snapshot}"
    return counts


def diagnose(broker: KafkaBroker, sim: VTGateSim, p: dict[str, str], message: str) -> str:
    """Every record of the keys that differ from the source (op, shard, gtid, snapshot), for diagnosis."""
    table = message.split(":", 1)[0]
    pk = PKS.get(table, ("id",))
    recs = consume_all(broker.bootstrap, f"{p['topic.prefix']}.{KS}.{table}")
    state = materialise(recs)
    got = {tuple(as_text(r[c]) for c in pk): r for r in state.rows.values()}
    want = {tuple(r[c].decode() for c in pk): r for r in sim.source_truth(KS, table)}  # type: ignore[union-attr]
    bad = {k for k in set(got) ^ set(want)} | {k for k in set(got) & set(want)
                                                if {c: as_text(v) for c, v in got[k].items()} != {
                                                    c: v.decode() if isinstance(v, bytes) else as_text(v)
                                                    for c, v in want[k].items()}}
    lines = [f"differing keys: {sorted(bad)[:10]}"]
    for r in recs:
        key = json.loads(r.key)["payload"] if r.key else {}
        if tuple(as_text(key.get(c)) for c in pk) not in bad:
            continue
        v = json.loads(r.value)["payload"] if r.value else None
        src = (v or {}).get("source") or {}
        lines.append(f"  {r.partition}:{r.offset} key={key} op={(v or {}).get('op')} snap={src.get('snapshot')} "
                     f"shard={src.get('shard')} vgtid={src.get('vgtid')} after={(v or {}).get('after')}")
    return "\n".join(lines[:60])
