"""VStream failures against the test server's fault injection: what is retried, from where, how often.

Retriable statuses reconnect (capped exponential backoff) from the last position handed to the
sink, so nothing is lost or repeated; ``errors.max.retries`` bounds consecutive attempts; other
statuses stop the task at once with an actionable message. Plus TLS, static credentials and
``vitess.grpc.headers`` as the server receives them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from worker_fixtures import (
    CUSTOMER_DDL,
    commerce_sim,
    insert_customers,
    running_task,
    start_here,
    wait_for,
    worker_config,
)

from cdcworker import exitcodes
from cdcworker.config import WorkerConfig
from cdcworker.offsets import Vgtid
from kubetest.pki import new_ca
from localkafka import KafkaBroker, consume_all
from vtgatesim import FaultPlan, VTGateSim

INVALID_ARGUMENT = 3
INJECTED = "vttablet: rpc error: code = Unavailable desc = injected fault"


@pytest.fixture
def sim() -> Iterator[VTGateSim]:
    with commerce_sim() as s:
        yield s


def _config(broker: KafkaBroker, sim: VTGateSim, extra: dict[str, str] | None = None) -> WorkerConfig:
    """Starts at the shards' positions now (later writes are streamed); reconnects fast."""
    props = {
        **start_here(sim),
        "retriable.restart.connector.wait.ms": "50",
        "shardcdc.retry.backoff.max.ms": "200",
        **(extra or {}),
    }
    return worker_config(broker, sim.address, "commerce", extra=props)


def _at_source(sim: VTGateSim, position: Any) -> bool:
    return position is not None and {sg.shard: sg.gtid for sg in position} == sim.positions("commerce")


def test_unavailable_reconnects_from_the_last_position_without_loss_or_duplicates(
    sim: VTGateSim, kafka_broker: KafkaBroker
) -> None:
    cfg = _config(kafka_broker, sim)
    insert_customers(sim, range(1, 21))  # one transaction each, over both shards
    sim.inject(FaultPlan(fail_after_events=25))  # the first stream breaks after ~5 transactions
    with running_task(cfg) as run:
        wait_for(lambda: run.task.sink is not None and _at_source(sim, run.task.sink.durable_position()), what="all durable")
        reconnects = dict(run.task.metrics.reconnects)
        errors = dict(run.task.metrics.errors)
        result = run.stop()
    assert result.exit_code == exitcodes.OK, result.reason
    assert reconnects == {"UNAVAILABLE": 1}
    assert errors == {"UNAVAILABLE": 1}  # shardcdc_stream_errors_total{code="UNAVAILABLE"}
    records = consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer")
    ids = [json.loads(r.value)["payload"]["after"]["id"] for r in records]
    assert Counter(ids) == Counter(range(1, 21))  # every change once: none lost, none repeated
    first, second = (Vgtid.from_proto(req.vgtid) for req, _ in sim.vstream_calls)
    # The second call resumes where the first one's last complete transaction ended.
    assert second != first
    assert second.to_json() in {json.loads(r.value)["payload"]["source"]["vgtid"] for r in records}


@pytest.mark.parametrize("retries", [0, 2])
def test_errors_max_retries_bounds_the_reconnects(sim: VTGateSim, kafka_broker: KafkaBroker, retries: int) -> None:
    cfg = _config(kafka_broker, sim, {"errors.max.retries": str(retries)})
    insert_customers(sim, range(1, 3))
    sim.inject(FaultPlan(fail_after_events=0), next_stream=False)  # every stream fails at its first event
    with running_task(cfg) as run:
        result = run.wait(60)
        reconnects = dict(run.task.metrics.reconnects)
        errors = dict(run.task.metrics.errors)
    assert result.exit_code == exitcodes.FAILED
    assert errors == {"UNAVAILABLE": retries + 1}  # the last one too, after which the task gives up
    assert result.reason == f"giving up after {retries} retries (errors.max.retries={retries}): UNAVAILABLE: {INJECTED}"
    assert len(sim.vstream_calls) == retries + 1
    assert reconnects == ({"UNAVAILABLE": retries} if retries else {})


def test_a_non_retriable_status_fails_at_once_with_what_to_check(sim: VTGateSim, kafka_broker: KafkaBroker) -> None:
    cfg = _config(kafka_broker, sim)  # errors.max.retries=-1: retriable errors would be retried forever
    insert_customers(sim, range(1, 3))
    sim.inject(FaultPlan(fail_after_events=0, fail_code=INVALID_ARGUMENT, fail_message="bad vgtid"), next_stream=False)
    with running_task(cfg) as run:
        result = run.wait(60)
        reconnects = dict(run.task.metrics.reconnects)
        errors = dict(run.task.metrics.errors)
    assert result.exit_code == exitcodes.FAILED
    assert errors == {"INVALID_ARGUMENT": 1}
    assert result.reason == "INVALID_ARGUMENT: bad vgtid (check vitess.keyspace, vitess.shard and vitess.vgtid)"
    assert (len(sim.vstream_calls), reconnects) == (1, {})


def test_tls_credentials_and_headers_reach_vtgate(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    ca = new_ca("vtgate test CA")
    served = ca.issue_server("localhost", ["localhost", "127.0.0.1"])
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert_pem)
    with VTGateSim(tls=(served.key_pem, served.cert_pem)) as sim:
        sim.create_keyspace("commerce", ["-80", "80-"], ddl=[CUSTOMER_DDL])
        tls = {
            "shardcdc.vitess.tls.enabled": "true",
            "shardcdc.vitess.tls.ca.file": str(ca_file),
            "database.user": "cdc",
            "database.password": "s3cret",
            "vitess.grpc.headers": "x-tenant:blue,X-Trace:abc",
        }
        cfg = _config(kafka_broker, sim, tls)
        insert_customers(sim, range(1, 4))
        with running_task(cfg) as run:
            wait_for(lambda: run.task.sink is not None and _at_source(sim, run.task.sink.durable_position()), what="all durable")
            result = run.stop()
        assert result.exit_code == exitcodes.OK, result.reason
        ((_, metadata),) = sim.vstream_calls
    # Vitess' static auth sends username/password as call metadata; header names are lower-cased (gRPC).
    assert [kv for kv in metadata if kv[0] in ("username", "password", "x-tenant", "x-trace")] == [
        ("username", "cdc"), ("password", "s3cret"), ("x-tenant", "blue"), ("x-trace", "abc"),
    ]  # fmt: skip
    records = consume_all(kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer")
    assert sorted(json.loads(r.value)["payload"]["after"]["id"] for r in records) == [1, 2, 3]
