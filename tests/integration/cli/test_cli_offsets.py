"""``shardcdc offsets list|reset|set`` against a real broker, and the pure planning under it.

Offsets are written with ``OffsetStore`` exactly as workers (and Kafka Connect) write them; after each
command the topic is read back and compared byte for byte. Another connector's records in the same
topic must never change.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdcoperator.offsets import stopped_problem
from cdcworker.offsets import OffsetPartition, OffsetValue, Vgtid, offset_record_key
from cdcworker.offsets.edits import (
    OffsetsError,
    connect_document,
    entries,
    plan_alter,
    plan_reset,
    plan_set_shards,
)
from cdcworker.offsets.store import OffsetStore
from localkafka import KafkaBroker
from shardcdc_cli import cli

G1 = "MySQL56/aaaaaaaa-0000-0000-0000-000000000001:1-10"
G2 = "MySQL56/bbbbbbbb-0000-0000-0000-000000000002:1-20"
G3 = "MySQL56/cccccccc-0000-0000-0000-000000000003:1-30"


def value(gtids: dict[str, str], **extra: Any) -> OffsetValue:
    return OffsetValue.build(Vgtid.of("commerce", gtids), extra=list(extra.items()))


def seed_records() -> dict[bytes, bytes]:
    """Generation 0 (1 task) superseded by generation 1 (2 tasks), plus another connector's record."""
    out: dict[bytes, bytes] = {}
    for name, part, val in (
        ("orders", OffsetPartition.for_task("orders", 0, 1, 0), value({"-80": G1, "80-": G1})),
        ("orders", OffsetPartition.for_task("orders", 0, 2, 1), value({"-80": G2})),
        ("orders", OffsetPartition.for_task("orders", 1, 2, 1), value({"80-": G3}, transaction_epoch=3)),
        ("billing", OffsetPartition.for_task("billing", 0, 1, 0), value({"-": G1})),
    ):
        out[offset_record_key(name, part)] = val.to_bytes()
    return out


# --- pure planning --------------------------------------------------------------------------------------


def test_entries_are_this_connectors_in_generation_order() -> None:
    records = seed_records()
    listed = entries(records, "orders")
    assert [e.partition.task_key for e in listed] == ["task0_1_0", "task0_2_1", "task1_2_1"]
    doc = connect_document(listed)
    assert doc["offsets"][2] == {
        "partition": {"server": "orders", "task_key": "task1_2_1"},
        "offset": {"vgtid": Vgtid.of("commerce", {"80-": G3}).to_json(), "transaction_epoch": 3},
    }
    assert entries(records, "nobody") == []


def test_reset_tombstones_every_record_of_the_connector_only() -> None:
    records = seed_records()
    changes = plan_reset(records, "orders")
    assert [(c.partition.task_key, c.new) for c in changes] == [("task0_1_0", None), ("task0_2_1", None),
                                                                 ("task1_2_1", None)]
    assert all(c.old == records[c.key] for c in changes)
    assert changes[0].describe() == f"delete  server=orders task0_1_0: -80@{G1}, 80-@{G1}"


def test_set_moves_a_shard_in_the_newest_generation_and_keeps_other_fields() -> None:
    records = seed_records()
    (change,) = plan_set_shards(records, "orders", {"80-": G1})
    assert change.partition.task_key == "task1_2_1"
    assert change.new == OffsetValue({"vgtid": Vgtid.of("commerce", {"80-": G1}).to_json(),
                                      "transaction_epoch": 3}).to_bytes()
    assert change.new == (b'{"vgtid":"[{\\"keyspace\\":\\"commerce\\",\\"shard\\":\\"80-\\",\\"gtid\\":\\"'
                          + G1.encode() + b'\\",\\"table_p_ks\\":[]}]","transaction_epoch":3}')
    with pytest.raises(OffsetsError, match=r"shards c0- are not in the offsets of generation 1 \(it holds -80, 80-\)"):
        plan_set_shards(records, "orders", {"c0-": G1})
    assert plan_set_shards(records, "orders", {"-80": G2}) == []  # already there: nothing to write


def test_alter_follows_connects_patch_semantics() -> None:
    records = seed_records()
    doc = {"offsets": [
        {"partition": {"server": "orders", "task_key": "task0_1_0"}, "offset": None},
        {"partition": {"server": "orders", "task_key": "task0_2_1"},
         "offset": {"vgtid": Vgtid.of("commerce", {"-80": G3}).to_json()}},
        {"partition": {"server": "orders", "task_key": "task1_2_1"},
         "offset": json.loads(records[offset_record_key("orders", OffsetPartition.for_task("orders", 1, 2, 1))])},
    ]}
    changes = plan_alter(records, "orders", doc)
    assert [(c.partition.task_key, c.new is None) for c in changes] == [("task0_1_0", True), ("task0_2_1", False)]
    with pytest.raises(OffsetsError, match="not a Vitess partition"):
        plan_alter(records, "orders", {"offsets": [{"partition": {"file": "x"}, "offset": None}]})
    with pytest.raises(OffsetsError, match="'vgtid' must be a string holding a JSON list"):
        plan_alter(records, "orders", {"offsets": [{"partition": {"server": "orders"}, "offset": {"pos": 1}}]})


def test_stopped_problem_needs_stopped_state_observed_and_exited_workers() -> None:
    body: dict[str, Any] = {"metadata": {"generation": 2}, "spec": {"state": "running"},
                            "status": {"observedGeneration": 2, "assignment": {"generation": 1, "phase": "Running"}}}
    assert "spec.state is 'running'" in (stopped_problem(body) or "")
    body["spec"]["state"], body["metadata"]["generation"] = "stopped", 3
    assert "not yet observed" in (stopped_problem(body) or "")
    body["status"]["observedGeneration"] = 3
    assert "have not all exited" in (stopped_problem(body) or "")
    body["status"]["assignment"]["phase"] = "Stopped"  # set at once; the workers are still flushing
    assert "have not all exited" in (stopped_problem(body) or "")
    body["status"]["assignment"]["stoppedCleanly"] = True  # every worker exited: offsets are final
    assert stopped_problem(body) is None


# --- the command against a real broker -------------------------------------------------------------------


@pytest.fixture
def topic(kafka_broker: KafkaBroker) -> str:
    name = f"offsets-{uuid.uuid4().hex[:8]}"
    with OffsetStore({"bootstrap.servers": kafka_broker.bootstrap}, name, partitions=5, replication_factor=1) as s:
        s.ensure_topic()
        for key, val in seed_records().items():
            s.own_producer().produce(name, key=key, value=val, partition=s.partition_for(key))
        assert s.own_producer().flush(30) == 0
    return name


def read(broker: KafkaBroker, topic: str) -> dict[bytes, bytes]:
    with OffsetStore({"bootstrap.servers": broker.bootstrap}, topic) as s:
        return s.load()


def shardcdc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_prints_connects_document(kafka_broker: KafkaBroker, topic: str, capsys: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    common = ("--local", "--bootstrap-servers", kafka_broker.bootstrap, "--offsets-topic", topic)
    rc, out, _ = shardcdc(capsys, "offsets", "list", "orders", *common, "--json")
    assert rc == 0
    assert json.loads(out) == connect_document(entries(seed_records(), "orders"))
    rc, out, _ = shardcdc(capsys, "offsets", "list", "orders", *common)
    assert rc == 0
    rows = [line for line in out.splitlines() if "task" in line and "orders" in line]
    assert len(rows) == 4  # one row per shard position: 2 + 1 + 1
    assert G3 in out and "task1_2_1" in out


def test_set_and_reset_write_exact_records(kafka_broker: KafkaBroker, topic: str, capsys: Any,
                                           tmp_path: Path) -> None:
    state = tmp_path / "state"
    local = ("--local", "--state-dir", str(state), "--bootstrap-servers", kafka_broker.bootstrap,
             "--offsets-topic", topic)
    before = read(kafka_broker, topic)

    # `shardcdc run` never ran it here, so nothing shows it is stopped: refused, as in a cluster.
    for args in (("reset",), ("set", f"--shard=-80={G1}")):
        rc, out, err = shardcdc(capsys, "offsets", args[0], "orders", *local, *args[1:], "--yes")
        assert (rc, out) == (3, "")
        assert err == (f"refusing to change the offsets of default/orders: no `shardcdc run` state of it under {state}, "
                       "so nothing shows it is stopped; give the --state-dir of its `shardcdc run`, or "
                       "--force-offline if no worker of it runs anywhere\n")
    assert read(kafka_broker, topic) == before

    # --force-offline: the check is the user's, and a warning says so.
    common = (*local, "--force-offline")
    # Without --yes and without a terminal nothing is written.
    rc, out, err = shardcdc(capsys, "offsets", "reset", "orders", *common)
    assert rc == 0 and "nothing changed" in out
    assert "--force-offline: not checking that connector 'orders' is stopped" in err
    assert read(kafka_broker, topic) == before

    rc, out, _ = shardcdc(capsys, "offsets", "set", "orders", *common, f"--shard=-80={G1}", "--yes")
    assert rc == 0, out
    assert f"change  server=orders task0_2_1: -80@{G2} -> -80@{G1}" in out
    after = read(kafka_broker, topic)
    key = offset_record_key("orders", OffsetPartition.for_task("orders", 0, 2, 1))
    assert after == {**before, key: value({"-80": G1}).to_bytes()}

    # An offsets document (list --json output, edited) round-trips through --offsets-file.
    doc = connect_document(entries(after, "orders"))
    doc["offsets"][0]["offset"] = None
    (tmp_path / "doc.json").write_text(json.dumps(doc))
    rc, out, _ = shardcdc(capsys, "offsets", "set", "orders", *common, "--offsets-file",
                          str(tmp_path / "doc.json"), "--yes")
    assert rc == 0 and "wrote 1 records" in out
    gen0 = offset_record_key("orders", OffsetPartition.for_task("orders", 0, 1, 0))
    assert read(kafka_broker, topic) == {k: v for k, v in after.items() if k != gen0}

    rc, out, _ = shardcdc(capsys, "offsets", "reset", "orders", *common, "--yes")
    assert rc == 0 and "wrote 2 records" in out
    billing = offset_record_key("billing", OffsetPartition.for_task("billing", 0, 1, 0))
    assert read(kafka_broker, topic) == {billing: before[billing]}
    rc, out, _ = shardcdc(capsys, "offsets", "reset", "orders", *common, "--yes")
    assert rc == 0 and "nothing to change" in out


def test_errors_are_one_line_messages(kafka_broker: KafkaBroker, topic: str, capsys: Any) -> None:
    common = ("--local", "--bootstrap-servers", kafka_broker.bootstrap)
    rc, _, err = shardcdc(capsys, "offsets", "list", "orders", *common, "--offsets-topic", "no-such-topic",
                          "--timeout", "5")
    assert rc == 1 and "offsets topic 'no-such-topic' not found" in err
    rc, _, err = shardcdc(capsys, "offsets", "set", "orders", *common, "--offsets-topic", topic, "--yes",
                          "--force-offline")
    assert rc == 1 and "give --shard SHARD=GTID (repeatable) or --offsets-file FILE" in err
    rc, _, err = shardcdc(capsys, "offsets", "list", "--local", "--offsets-topic", topic)
    assert rc == 1 and "give the connector NAME" in err


# --- the confirmation prompt, answered on a terminal ------------------------------------------------------


class Terminal:
    """``shardcdc`` on a pseudo-terminal (stdin, stdout and stderr): what a user at the prompt sees and types."""

    def __init__(self, *args: str) -> None:
        self.master, slave = pty.openpty()
        # 250 columns: one line per record, as the expected text below is written.
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "shardcdc_cli.cli", *args], stdin=slave, stdout=slave,
                                     stderr=slave, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "250"})
        os.close(slave)
        self.raw = b""

    def text(self) -> str:
        """The output as shown: escape sequences (styles, cursor) removed, CRLF as LF."""
        plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", self.raw.decode(errors="replace"))
        return plain.replace("\r\n", "\n")

    def _read(self, deadline: float) -> bool:
        """One chunk of output (False at end of output); fails at the deadline."""
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out; output so far: {self.text()!r}"
        ready, _, _ = select.select([self.master], [], [], remaining)
        if not ready:
            return True
        try:
            chunk = os.read(self.master, 4096)
        except OSError:  # EIO: every holder of the terminal's other end has exited
            return False
        self.raw += chunk
        return bool(chunk)

    def wait_for_text(self, text: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.text():
            assert self._read(deadline), f"exited before showing {text!r}: {self.text()!r}"
        return self.text()

    def answer(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    def finish(self, timeout: float = 60.0) -> tuple[int, str]:
        deadline = time.monotonic() + timeout
        while self._read(deadline):
            pass
        rc = self.proc.wait(timeout=max(deadline - time.monotonic(), 1))
        os.close(self.master)
        return rc, self.text()


def test_confirmation_prompt_on_a_terminal(kafka_broker: KafkaBroker, topic: str) -> None:
    common = ("--local", "--force-offline", "--bootstrap-servers", kafka_broker.bootstrap, "--offsets-topic", topic)
    warning = ("warning: --force-offline: not checking that connector 'orders' is stopped; if a worker of it runs, "
               "it overwrites these offsets (or resumes from the wrong place)\n")
    before = read(kafka_broker, topic)

    # "n": nothing is written.
    term = Terminal("offsets", "reset", "orders", *common)
    prompt = "write these 3 records? [y/n] (n): "
    assert term.wait_for_text(prompt) == (
        f"{warning}reset: 3 records of orders in topic {topic}:\n"
        f"  delete  server=orders task0_1_0: -80@{G1}, 80-@{G1}\n"
        f"  delete  server=orders task0_2_1: -80@{G2}\n"
        f"  delete  server=orders task1_2_1: 80-@{G3}\n{prompt}")
    term.answer("n")
    rc, shown = term.finish()
    assert (rc, shown.split(prompt)[1]) == (0, "n\ndeclined: nothing changed\n")
    assert read(kafka_broker, topic) == before

    # "y": exactly the change shown is written.
    term = Terminal("offsets", "set", "orders", *common, f"--shard=-80={G1}")
    prompt = "write these 1 records? [y/n] (n): "
    assert term.wait_for_text(prompt) == (
        f"{warning}set: 1 records of orders in topic {topic}:\n"
        f"  change  server=orders task0_2_1: -80@{G2} -> -80@{G1}\n{prompt}")
    term.answer("y")
    rc, shown = term.finish()
    assert (rc, shown.split(prompt)[1]) == (0, "y\nwrote 1 records\n")
    key = offset_record_key("orders", OffsetPartition.for_task("orders", 0, 2, 1))
    assert read(kafka_broker, topic) == {**before, key: value({"-80": G1}).to_bytes()}


def test_handback_writes_new_generations_only_and_prints_debeziums_settings(
        kafka_broker: KafkaBroker, topic: str, capsys: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    state = tmp_path / "state"
    local = ("--local", "--state-dir", str(state), "--bootstrap-servers", kafka_broker.bootstrap,
             "--offsets-topic", topic, "--topic-prefix", "orders")
    before = read(kafka_broker, topic)
    rc, out, err = shardcdc(capsys, "offsets", "handback", "orders", *local, "--tasks-max", "2", "--yes")
    assert (rc, out) == (3, "") and err.startswith("refusing to change the offsets of default/orders: ")
    rc, out, err = shardcdc(capsys, "offsets", "handback", "orders", *local, "--force-offline", "--yes")
    assert rc == 1 and "shardcdc offsets: shardcdc's task count is unknown (no status): give --tasks-max N\n" in err

    # Generation 1 (2 tasks) is shardcdc's newest; Debezium keeps 2 tasks, which Debezium refuses on
    # generation 1 itself: generation 2 gets one key with both shards, generation 3 Debezium's 2 keys.
    rc, out, _ = shardcdc(capsys, "offsets", "handback", "orders", *local, "--force-offline", "--tasks-max", "2",
                          "--yes")
    assert rc == 0, out
    assert out.splitlines()[-13:] == [
        "handback: 3 records of orders in topic " + topic + ":",
        f"  create  server=orders task0_1_2: -80@{G2}, 80-@{G3}",
        f"  create  server=orders task0_2_3: -80@{G2}",
        f"  create  server=orders task1_2_3: 80-@{G3}",
        "wrote 3 records",
        "Debezium Vitess connector settings (the rest of its configuration unchanged):",
        "  name=orders", "  topic.prefix=orders", "  vitess.offset.storage.per.task=true",
        "  vitess.offset.storage.task.key.gen=3", "  vitess.prev.num.tasks=1", "  tasks.max=2",
        f"Kafka Connect worker: offset.storage.topic={topic} (distributed mode)",
    ]
    after = read(kafka_broker, topic)
    new = {k: v for k, v in after.items() if k not in before}
    assert {k: v for k, v in after.items() if k in before} == before  # nothing else changed or deleted
    key = offset_record_key("orders", OffsetPartition.for_task("orders", 1, 2, 3))
    assert new[key] == value({"80-": G3}).to_bytes() and len(new) == 3

    # Without per-task offsets: the plain server key, one task, the per-task settings removed.
    rc, out, _ = shardcdc(capsys, "offsets", "handback", "orders", *local, "--force-offline", "--no-per-task", "--yes")
    assert rc == 0, out
    assert out.splitlines()[1:] == [
        f"  create  server=orders (connector-wide): -80@{G2}, 80-@{G3}", "wrote 1 records",
        "Debezium Vitess connector settings (the rest of its configuration unchanged):",
        "  name=orders", "  topic.prefix=orders", "  vitess.offset.storage.per.task=false", "  tasks.max=1",
        "  remove vitess.offset.storage.task.key.gen", "  remove vitess.prev.num.tasks",
        f"Kafka Connect worker: offset.storage.topic={topic} (distributed mode)"]
