"""``shardcdc validate``, ``status --url``, ``tail`` and ``verify`` on real inputs.

``validate`` runs the worker's own checks on files; the others run against a live worker task
streaming from the VTGate test server into the real broker (its status endpoint served by the
worker's own server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from observability_fixtures import running
from worker_fixtures import CUSTOMER_DDL, running_task, wait_for, wait_positioned, worker_config

from localkafka import KafkaBroker
from shardcdc_cli import cli
from vtgatesim import VTGateSim

ROOT = Path(__file__).resolve().parents[3]


def shardcdc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


BAD = """
apiVersion: shardcdc.io/v1alpha1
kind: CdcConnector
metadata: {name: orders}
spec:
  source: {vitess: {vtgate: "vtgate:15991", keyspace: commerce}}
  kafka: {bootstrapServers: "kafka:9092", topicPrefix: orders}
  config:
    tasks.max: "3"
    decimal.handling.mode: bogus
    table.include.list: "commerce\\\\.(a"
---
apiVersion: shardcdc.io/v1alpha1
kind: CdcConnector
metadata: {name: nohost}
spec:
  source: {vitess: {vtgate: "vtgate", keyspace: commerce}}
  kafka: {bootstrapServers: "kafka:9092", topicPrefix: orders}
"""


def test_validate_connector_yaml_and_properties(tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    rc, out, _ = shardcdc(capsys, "validate", "-f", str(bad))
    assert rc == 1
    lines = out.splitlines()
    assert lines == [
        f"invalid {bad} CdcConnector/orders: 3 problems",
        "  - spec.config: Invalid value: \"object\": spec.config must not set tasks.max; use spec.tasks (or "
        "kubectl scale)",
        "  - spec.config: decimal.handling.mode: 'bogus' is not one of: precise, double, string",
        "  - spec.config: table.include.list: 'commerce\\\\.(a' is not a valid regular expression: missing ), "
        "unterminated subpattern at position 10",
        f"invalid {bad} CdcConnector/nohost: 1 problem",
        "  - spec.source.vitess.vtgate: Invalid value: \"vtgate\": spec.source.vitess.vtgate in body should match "
        "'^(\\[[0-9a-fA-F:.]+\\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?):[1-9][0-9]{0,4}$'",
    ]
    examples = sorted(str(p) for p in (ROOT / "examples").rglob("*.yaml")
                      if "\nkind: CdcConnector\n" in p.read_text())
    assert examples
    rc, out, _ = shardcdc(capsys, "validate", *[a for p in examples for a in ("-f", p)])
    assert rc == 0, out
    props = tmp_path / "worker.properties"
    props.write_text("name=orders\ntopic.prefix=orders\ndatabase.hostname=vtgate\ndatabase.port=15991\n"
                     "vitess.keyspace=commerce\nbootstrap.servers=kafka:9092\n")
    rc, out, _ = shardcdc(capsys, "validate", "-f", str(props))
    assert (rc, out.strip()) == (0, f"valid {props}")
    props.write_text(props.read_text() + "snapshot.mode=sometimes\n")
    rc, out, _ = shardcdc(capsys, "validate", "-f", str(props))
    assert rc == 1 and "snapshot.mode: 'sometimes' is not one of" in out
    rc, _, err = shardcdc(capsys, "validate", "-f", str(tmp_path / "missing.yaml"))
    assert rc == 2 and "cannot read" in err


@pytest.fixture(scope="module")
def live(kafka_broker: KafkaBroker) -> Iterator[tuple[VTGateSim, Any, str]]:
    with VTGateSim() as sim:
        sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER_DDL])
        cfg = worker_config(kafka_broker, sim.address, "commerce")
        with running_task(cfg) as run:
            wait_positioned(sim, run)
            for i in range(1, 21):
                sim.execute(f"INSERT INTO customer (id, email) VALUES ({i}, 'u{i}@x.io')", "commerce")
            sim.execute("UPDATE customer SET email = 'changed@x.io' WHERE id = 3", "commerce")
            sim.execute("DELETE FROM customer WHERE id = 4", "commerce")
            wait_for(lambda: run.task.metrics.records_sent >= 23, what="the workload streamed")
            with running(run.task.metrics) as url:
                yield sim, cfg, url
            run.stop()


def test_status_from_worker_urls(live: tuple[VTGateSim, Any, str], capsys: Any,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    sim, cfg, url = live
    rc, out, _ = shardcdc(capsys, "status", "--url", url, "--json")
    doc = json.loads(out)[url]
    assert rc == 0 and doc["state"] == "streaming" and [s["shard"] for s in doc["shards"]] == ["-80", "80-"]
    rc, out, _ = shardcdc(capsys, "status", "--url", url)
    assert rc == 0
    for shard in sim.positions("commerce"):
        assert shard in out
    assert cfg.name in out and "streaming" in out
    rc, out, _ = shardcdc(capsys, "status", "--url", url, "--url", "http://127.0.0.1:9/")
    assert rc == 1 and "unreachable" in out


def test_tail_decodes_events(live: tuple[VTGateSim, Any, str], kafka_broker: KafkaBroker, capsys: Any,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    _, cfg, _ = live
    topic = f"{cfg.topic_prefix}.commerce.customer"
    rc, out, _ = shardcdc(capsys, "tail", topic, "--bootstrap-servers", kafka_broker.bootstrap,
                          "--from-beginning", "--idle-timeout", "2")
    assert rc == 0
    lines = out.splitlines()
    assert len(lines) == 23  # 20 creates, 1 update, 1 delete and its tombstone
    assert sum(" create " in f" {line} " for line in lines) == 20
    (update,) = [line for line in lines if "update" in line]
    assert "customer" in update and "email: 'u3@x.io' -> 'changed@x.io'" in update
    assert sum("tombstone" in line for line in lines) == 1
    rc, out, _ = shardcdc(capsys, "tail", topic, "--bootstrap-servers", kafka_broker.bootstrap,
                          "--from-beginning", "--max-messages", "1", "--json")
    assert rc == 0 and json.loads(out)["value"]["op"] == "c"
    rc, _, err = shardcdc(capsys, "tail", "no-such-topic", "--bootstrap-servers", kafka_broker.bootstrap,
                          "--idle-timeout", "1")
    assert rc == 1 and "not found" in err


def test_verify_compares_topic_with_the_source(live: tuple[VTGateSim, Any, str], kafka_broker: KafkaBroker,
                                               capsys: Any) -> None:
    sim, cfg, _ = live
    common = ("--vtgate", sim.address, "--keyspace", "commerce", "--table", "customer",
              "--bootstrap-servers", kafka_broker.bootstrap, "--prefix", cfg.topic_prefix)
    rc, out, _ = shardcdc(capsys, "verify", *common, "--wait", "20")
    assert rc == 0, out
    assert "materialises to the 19 rows of commerce.customer" in out
    # A row the topic does not have yet: the live worker catches up within the wait.
    sim.execute("INSERT INTO customer (id, email) VALUES (999, 'late@x.io')", "commerce")
    rc, out, _ = shardcdc(capsys, "verify", *common, "--wait", "20")
    assert rc == 0 and "20 rows" in out
    # The same topic against another keyspace's table (not streamed): different, with a summary.
    sim.create_keyspace("other", ["-"], ddl=[CUSTOMER_DDL])
    sim.execute("INSERT INTO customer (id, email) VALUES (1, 'u1@x.io')", "other")
    rc, out, _ = shardcdc(capsys, "verify", "--vtgate", sim.address, "--keyspace", "other", "--table", "customer",
                          "--bootstrap-servers", kafka_broker.bootstrap, "--topic", f"{cfg.topic_prefix}.commerce.customer")
    assert rc == 1, out
    assert "0 missing, 19 unexpected, 0 changed" in out
