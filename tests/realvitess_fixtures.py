"""Helpers of the real-Vitess tier (``-m realvitess``): the session's cluster (``real_vitess`` in
conftest), its tables, a workload through VTGate, and "the topic equals the source"."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import random
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from confluent_kafka import KafkaException
from polling import wait_for

from cdcoperator.local.children import start_bound
from cdcworker.config import property_to_env
from localkafka import ConsumedRecord, KafkaBroker, consume_all
from localkafka.broker import free_port
from realvitess import VTGateClient, VTTestServer
from realvitess.client import VTGateError
from realvitess.cluster import VitessCluster
from realvitess.single import hash_vschema
from shardcdc_cli.materialise import Materialised, compare, materialise
from vitessapi import binlogdata_pb2, vtgate_pb2, vtgateservice_pb2_grpc

KEYSPACE = "commerce"
SHARDS = 2
# One table per test (tests share the session's cluster): created at start, ``hash`` vindex on id.
TABLES = ("items_alo", "items_eos", "items_kill", "items_bf", "fid", "big_alo", "big_eos", "bf_two", "bf_three",
          "demo_items")
COLUMNS = ("id", "name", "qty", "price")
TABLE_DDL = ("create table {t} (id bigint not null, name varchar(64), qty int, price decimal(10,2), "
             "primary key (id))")
# Tables with columns of their own (the differential suite: every column type, the copy phase, DDL).
OWN_TABLES = {
    "diff_types": (
        "create table diff_types (id bigint not null, ti tinyint, tb tinyint(1), su smallint unsigned, mi mediumint, "
        "i int, bu bigint unsigned, fl float, db double, dc decimal(12,4), d date, t time(3), dtm datetime(6), "
        "ts timestamp(3) null default null, yr year, ch char(8), vc varchar(32), tx text, bn binary(4), "
        "vb varbinary(16), bl blob, js json, en enum('a','b','c'), st set('x','y','z'), bt bit(8), "
        "u8 varchar(16) character set utf8mb4, lt varchar(16) character set latin1, primary key (id))"),
    **{t: TABLE_DDL.format(t=t) for t in ("diff_copy_a", "diff_copy_b", "diff_ddl")},
}

pytestmark = pytest.mark.realvitess


@contextmanager
def start_commerce() -> Iterator[VTTestServer]:
    ddl = [TABLE_DDL.format(t=t) for t in TABLES] + list(OWN_TABLES.values())
    with VTTestServer(KEYSPACE, SHARDS, ddl, hash_vschema((*TABLES, *OWN_TABLES))) as vt:
        yield vt


@dataclass
class Writer:
    """Deterministic inserts, updates, id changes (delete + insert: Vitess refuses to UPDATE the
    primary vindex column) and deletes on one table, through VTGate."""

    client: VTGateClient
    table: str
    seed: int = 1
    keyspace: str = KEYSPACE
    ids: list[int] = field(default_factory=list)
    next_id: int = 1
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def insert(self, count: int) -> None:
        rows = []
        for _ in range(count):
            i, self.next_id = self.next_id, self.next_id + 1
            self.ids.append(i)
            rows.append(f"({i}, 'n{i}', {self.rng.randint(0, 1000)}, {self.rng.randint(0, 99999) / 100:.2f})")
        self.client.execute(f"insert into {self.table} (id, name, qty, price) values {', '.join(rows)}", self.keyspace)

    def step(self) -> str:
        op = self.rng.random()
        if op < 0.4 or len(self.ids) < 10:
            self.insert(self.rng.randint(1, 4))
            return "insert"
        if op < 0.8:
            i = self.rng.choice(self.ids)
            self.client.execute(f"update {self.table} set qty = qty + 1, name = 'u{self.rng.randint(0, 9999)}' "
                                f"where id = {i}", self.keyspace)
            return "update"
        i = self.ids.pop(self.rng.randrange(len(self.ids)))
        if op < 0.9:
            j, self.next_id = self.next_id, self.next_id + 1
            self.ids.append(j)
            found = self.client.rows(f"select name, qty, price from {self.table} where id = {i}", self.keyspace)
            if not found:  # its insert was refused (e.g. while traffic switched): nothing to move
                self.ids.remove(j)
                return "none"
            row = found[0]
            vals = ", ".join("null" if v is None else f"'{v.decode()}'" for v in row.values())
            self.client.transaction([f"delete from {self.table} where id = {i}",
                                     f"insert into {self.table} (id, name, qty, price) values ({j}, {vals})"], self.keyspace)
            return "move"
        self.client.execute(f"delete from {self.table} where id = {i}", self.keyspace)
        return "delete"

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()


class Worker:
    """``shardcdc worker -c CONFIG`` as a process with its /status endpoint on a port of its own."""

    def __init__(self, config: Path, log: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "SHARDCDC_LOG_LEVEL": "WARNING",
               property_to_env("shardcdc.metrics.port"): str(self.port)}
        with log.open("ab") as out:
            self.proc = start_bound([sys.executable, "-m", "shardcdc_cli.cli", "worker", "-c", str(config)],
                                    stdout=out, stderr=subprocess.STDOUT, env=env)
        self.log = log

    def status(self) -> dict[str, Any]:
        if self.proc.poll() is not None:  # not an AssertionError: wait_for must not wait this out
            raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/status", timeout=2) as resp:
                doc: dict[str, Any] = json.loads(resp.read())
                return doc
        except OSError:
            return {}

    def sent(self) -> int:
        return int(self.status().get("records_sent", -1))

    def streaming(self) -> bool:
        doc = self.status()
        return bool(doc.get("connected") and doc.get("state") == "streaming")


def write_properties(path: Path, props: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def per_key_order_kept(recs: Sequence[ConsumedRecord]) -> int:
    """Every key's changes arrive in the order they were made: ``Writer`` updates add 1 to ``qty``,
    so a key's ``qty`` grows strictly from record to record, and a delete is its last change. The
    number of keys checked."""
    last: dict[bytes, int | None] = {}  # key -> qty of its latest change (None: deleted)
    for rec in recs:
        if rec.key is None or rec.value is None:
            continue
        doc = json.loads(rec.value)
        payload = doc.get("payload", doc)
        before = last.get(rec.key, -1)
        assert before is not None, f"a change after the delete of key {rec.key!r}: {payload}"
        if payload["op"] == "d":
            last[rec.key] = None
            continue
        qty = payload["after"]["qty"]
        if payload["op"] == "u":
            assert qty > before, f"key {rec.key!r} out of order: qty {qty} after {before}"
        last[rec.key] = qty
    return len(last)


def worker_props(broker: KafkaBroker, vt: VTTestServer | VitessCluster, prefix: str, table: str,
                 keyspace: str = KEYSPACE, **extra: str) -> dict[str, str]:
    host, port = vt.vtgate.rsplit(":", 1)
    return {
        "name": f"conn-{prefix}", "topic.prefix": prefix, "database.hostname": host, "database.port": port,
        "vitess.keyspace": keyspace, "vitess.tablet.type": "PRIMARY", "bootstrap.servers": broker.bootstrap,
        "offset.storage.topic": f"offsets-{prefix}", "offset.storage.replication.factor": "1",
        "offset.storage.partitions": "1", "offset.flush.interval.ms": "100", "snapshot.mode": "initial",
        "table.include.list": f"{keyspace}.{table}", "shardcdc.metrics.port": "0", **extra,
    }


def topic_of(prefix: str, table: str, keyspace: str = KEYSPACE) -> str:
    return f"{prefix}.{keyspace}.{table}"


def records(broker: KafkaBroker, prefix: str, table: str, read_committed: bool = False,
            keyspace: str = KEYSPACE) -> list[ConsumedRecord]:
    """The table topic's records so far ([] before the worker created it)."""
    try:
        return consume_all(broker.bootstrap, topic_of(prefix, table, keyspace), read_committed=read_committed,
                           timeout=10)
    except (KafkaException, TimeoutError):  # not created yet, or just created (no EOF yet)
        return []


def topic_equals_source(broker: KafkaBroker, client: VTGateClient, prefix: str, table: str,
                        read_committed: bool = False, timeout: float = 180.0, keyspace: str = KEYSPACE,
                        columns: Sequence[str] = COLUMNS) -> Materialised:
    """Poll until the topic, materialised (latest record per key, tombstones delete), equals the
    table's rows read through VTGate (after the writes stopped); the materialised state."""
    truth = client.source_truth(keyspace, table, columns)
    assert truth, f"{table} is empty: nothing would be compared"

    def same() -> Materialised:
        state = materialise(records(broker, prefix, table, read_committed, keyspace))
        diff = compare(state, truth, "id")
        assert not (diff.missing or diff.unexpected or diff.changed), diff
        return state

    return wait_for(same, timeout=timeout, what=f"topic {topic_of(prefix, table, keyspace)} to equal the source",
                    period=0.5)


@contextmanager
def workload(writer: Writer) -> Iterator[None]:
    """Writes in a thread while the block runs. Writes refused while traffic switches are skipped:
    the source truth is read at the end."""
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            with contextlib.suppress(VTGateError, grpc.RpcError):  # refused while a process is down
                writer.step()
            stop.wait(0.05)  # pacing the workload, not synchronisation

    thread = threading.Thread(target=work, name="workload", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(60)


def switch_traffic(vt: VitessCluster, keyspace: str, workflow: str, verb: str = "SwitchTraffic",
                   timeout: float = 300.0) -> None:
    """``Reshard … SwitchTraffic`` (or ``ReverseTraffic``) once vtctldclient accepts it: it refuses
    while the workflow (or the reverse one) copies or lags."""
    deadline, last = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        try:
            vt.vtctldclient("Reshard", "--workflow", workflow, "--target-keyspace", keyspace, verb)
            return
        except RuntimeError as exc:
            last = str(exc)[-500:]
        time.sleep(2)  # polling the workflow's state with a deadline
    raise AssertionError(f"{verb} not accepted within {timeout}s: {last}")


def reshard_create(vt: VitessCluster, keyspace: str, workflow: str, sources: Sequence[str],
                   targets: Sequence[str]) -> None:
    """``Reshard … create`` from ``sources`` to ``targets`` (their tablets up: ``vt.add_shards``), PRIMARY only."""
    vt.vtctldclient("Reshard", "--workflow", workflow, "--target-keyspace", keyspace, "create",
                    "--source-shards", ",".join(sources), "--target-shards", ",".join(targets),
                    "--tablet-types", "PRIMARY")


def vstream_queue(address: str, shard_gtids: Sequence[tuple[str, str]], tables: Sequence[str], stop: threading.Event,
                  keyspace: str = KEYSPACE, flags: vtgate_pb2.VStreamFlags | None = None) -> queue.Queue[Any]:
    """A VStream of ``keyspace``'s shards [(shard, gtid)] and ``tables`` (``select *`` rules) from any
    VTGate (real or the test server), its events read in a thread into a queue (an RpcError ends
    it) until ``stop`` is set."""
    channel = grpc.insecure_channel(address)
    call = vtgateservice_pb2_grpc.VitessStub(channel).VStream(vtgate_pb2.VStreamRequest(
        tablet_type=1, vgtid=binlogdata_pb2.VGtid(shard_gtids=[
            binlogdata_pb2.ShardGtid(keyspace=keyspace, shard=s, gtid=g) for s, g in shard_gtids]),
        filter=binlogdata_pb2.Filter(rules=[binlogdata_pb2.Rule(match=t, filter=f"select * from {t}")
                                            for t in tables]), flags=flags))
    out: queue.Queue[Any] = queue.Queue()

    def read() -> None:
        try:
            for resp in call:
                for ev in resp.events:
                    out.put(ev)
        except grpc.RpcError as exc:
            out.put(exc)
        channel.close()

    threading.Thread(target=read, daemon=True).start()
    threading.Thread(target=lambda: (stop.wait(), call.cancel()), daemon=True).start()
    return out
