"""An unreadable stored offset stops the task with one line: the key, what is wrong, the fix.

Issue 28, case 6: a non-JSON, truncated or wrong-shaped value in the offsets topic (``"vgtid"`` as
a JSON string instead of a list...) crash-looped the worker with a traceback and an empty
termination message, so the status said only ``CrashLoopBackOff (exit status 1)``. The task now
stops with ``StoredOffsetError``: in the log, in its termination message (the operator's status)
and in ``/status``; ``shardcdc offsets set|reset`` (the commands the message names) repair it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from confluent_kafka import Producer
from worker_fixtures import running_task, wait_positioned, worker_config

from cdcworker import exitcodes
from cdcworker.offsets import OffsetPartition, Vgtid
from cdcworker.offsets.keys import offset_record_key
from cdcworker.offsets.migration import StoredOffsetError, lookup_in
from cdcworker.offsets.store import OffsetStore
from localkafka import KafkaBroker
from shardcdc_cli import cli
from vtgatesim import VTGateSim

GOOD = {"vgtid": Vgtid.of("commerce", {"-80": "MySQL56/a:1-5", "80-": "MySQL56/b:1-7"}).to_json()}
GOOD_BYTES = json.dumps(GOOD, separators=(",", ":")).encode()

# (stored value, what the message says is wrong)
BAD_VALUES = [
    (b"{not json", "the value is not JSON"),
    (GOOD_BYTES[: len(GOOD_BYTES) // 2], "the value is not JSON"),  # truncated
    (b"\xff\xfe{}", "the value is not JSON"),
    (b"[1, 2]", "the value is not a JSON object"),
    (json.dumps({"vgtid": json.dumps("-80")}).encode(), "the VGTID must be a JSON list of shard positions"),
    (json.dumps({"vgtid": [{"keyspace": "commerce", "shard": "-80", "gtid": "x"}]}).encode(),
     "'vgtid' must be a string holding a JSON list"),
    (json.dumps({"vgtid": "[1]"}).encode(), "shard gtid must be an object"),
    (json.dumps({"vgtid": json.dumps([{"keyspace": "commerce", "shard": "-80"}])}).encode(), "shard gtid: missing 'gtid'"),
    (json.dumps({"vgtid": "[" * 50_000}).encode(), "the VGTID is not valid JSON"),
    (json.dumps({"pos": 4}).encode(), "'vgtid' must be a string"),
]


@pytest.mark.parametrize(("value", "problem"), BAD_VALUES, ids=[p for _, p in BAD_VALUES])
def test_an_unreadable_value_names_the_key_the_problem_and_the_fix(value: bytes, problem: str) -> None:
    key = offset_record_key("orders", OffsetPartition("shop"))
    with pytest.raises(StoredOffsetError) as caught:
        lookup_in({key: value}, "orders")(OffsetPartition("shop"))
    message = str(caught.value)
    assert message.startswith(f'the stored offset under key ["orders",{{"server":"shop"}}] is unreadable: {problem}')
    assert "`shardcdc offsets set orders --offsets-file FILE`" in message
    assert "`shardcdc offsets reset orders`" in message
    assert "\n" not in message and len(message) < 800


def _write_raw(broker: KafkaBroker, topic: str, key: bytes, value: bytes) -> None:
    OffsetStore({"bootstrap.servers": broker.bootstrap}, topic, partitions=1, replication_factor=1).ensure_topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, value, key, partition=0)
    assert producer.flush(30) == 0


def test_the_worker_stops_with_the_reason_and_the_fix_works(
        kafka_broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    termination = tmp_path / "termination-log"
    monkeypatch.setenv("SHARDCDC_TERMINATION_LOG", str(termination))
    with VTGateSim() as sim:
        sim.create_keyspace("commerce", ["-80", "80-"], ddl=["CREATE TABLE t (id BIGINT PRIMARY KEY)"])
        cfg = worker_config(kafka_broker, sim.address, "commerce")
        key = offset_record_key(cfg.name, OffsetPartition(cfg.topic_prefix))
        _write_raw(kafka_broker, cfg.kafka.offsets_topic, key, json.dumps({"vgtid": json.dumps("-80")}).encode())
        with caplog.at_level(logging.INFO), running_task(cfg) as run:
            result = run.wait(60)
        assert result.exit_code == exitcodes.FAILED
        assert f"the stored offset under key {key.decode()} is unreadable: the VGTID must be a JSON list" \
               in result.reason
        assert f"shardcdc offsets reset {cfg.name}" in result.reason
        assert json.loads(termination.read_text()) == {"error": result.reason}
        assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"

        # The fix the message names: the connector is stopped (its worker exited); reset its offsets.
        rc = cli.main(["offsets", "reset", cfg.name, "--local", "--force-offline", "--yes",
                       "--bootstrap-servers", kafka_broker.bootstrap, "--offsets-topic", cfg.kafka.offsets_topic])
        assert rc == 0, capsys.readouterr()
        with running_task(cfg) as run:
            wait_positioned(sim, run)  # started from the configuration, streaming every shard
            assert run.thread.is_alive()
