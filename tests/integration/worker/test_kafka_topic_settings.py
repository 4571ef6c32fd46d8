"""Topic creation refused because of a setting ends the task with one line naming the setting, its
value and the broker count: in the log, the termination message (the operator's ``Failed`` status)
and the task's state. No traceback, no crash loop of stack dumps (issue 27: the default
``offset.storage.replication.factor`` of 3 against a one-broker Kafka)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from worker_fixtures import commerce_sim, insert_customers, running_task, start_here, worker_config

from cdcoperator.local.children import start_bound, stop_group
from cdcworker import exitcodes
from cdcworker.config import property_to_env
from cdcworker.kafkaerrors import KafkaSettingError
from cdcworker.offsets.store import OffsetStore
from localkafka import KafkaBroker


def _rf_line(topic: str, setting: str) -> str:
    return (f"cannot create topic {topic!r}: {setting}=3 but the Kafka cluster has 1 broker; set {setting} to at "
            "most 1 (or -1 for the broker's default.replication.factor)")


def test_the_worker_stops_with_one_line_naming_the_offsets_replication_factor(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    prefix = f"rf{uuid.uuid4().hex[:8]}"
    termination = tmp_path / "termination-log"
    with commerce_sim() as sim:
        host, port = sim.address.rsplit(":", 1)
        props = {"name": f"conn-{prefix}", "topic.prefix": prefix, "database.hostname": host, "database.port": port,
                 "vitess.keyspace": "commerce", "bootstrap.servers": kafka_broker.bootstrap,
                 "offset.storage.topic": f"offsets-{prefix}", "offset.storage.replication.factor": "3"}
        config = tmp_path / "worker.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        env = {**os.environ, "SHARDCDC_TERMINATION_LOG": str(termination), property_to_env("shardcdc.metrics.port"): "0"}
        proc = start_bound([sys.executable, "-m", "shardcdc_cli.cli", "worker", "-c", str(config)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
        try:
            out, _ = proc.communicate(timeout=120)
        finally:
            stop_group(proc, kill=True)
    line = _rf_line(f"offsets-{prefix}", "offset.storage.replication.factor")
    assert proc.returncode == exitcodes.FAILED, out
    assert "Traceback" not in out and "INVALID_REPLICATION_FACTOR" not in out, out
    assert [ln for ln in out.splitlines() if "cannot create topic" in ln] == [
        next(ln for ln in out.splitlines() if ln.endswith(line))], out
    assert json.loads(termination.read_text()) == {"error": line}


def test_the_offsets_store_names_the_setting_and_the_broker_count(kafka_broker: KafkaBroker) -> None:
    topic = f"offsets-{uuid.uuid4().hex[:8]}"
    store = OffsetStore({"bootstrap.servers": kafka_broker.bootstrap}, topic, partitions=1, replication_factor=3)
    try:
        with pytest.raises(KafkaSettingError) as caught:
            store.ensure_topic()
    finally:
        store.close(1.0)
    assert str(caught.value) == _rf_line(topic, "offset.storage.replication.factor")


def test_a_data_topic_refused_mid_stream_names_the_topic_creation_group_setting(
    kafka_broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    termination = tmp_path / "termination-log"
    monkeypatch.setenv("SHARDCDC_TERMINATION_LOG", str(termination))
    with commerce_sim() as sim:
        cfg = worker_config(kafka_broker, sim.address, "commerce", extra={
            **start_here(sim), "topic.creation.default.partitions": "1",
            "topic.creation.default.replication.factor": "3"})
        with running_task(cfg) as run:
            insert_customers(sim, range(1, 2))
            result = run.wait()
    topic = f"{cfg.topic_prefix}.commerce.customer"
    assert result.exit_code == exitcodes.FAILED
    assert result.reason == _rf_line(topic, "topic.creation.default.replication.factor"), result.reason
    assert json.loads(termination.read_text()) == {"error": result.reason}
    assert run.task.metrics is not None and run.task.metrics.state == "failed"
