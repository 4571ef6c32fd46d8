"""The operator reaches a SASL/TLS Kafka cluster itself with the connector's Secret (rbac.kafkaSecrets).

Pure cases first (what settings a spec and a Secret make, and every refusal's message), then a
broker that checks passwords: the offsets scan and ``DeleteOffsets`` over SASL_SSL, and a whole
local-mode run (the operator's reconcile, its kubelet mounting the Secret for the workers) that
adopts Debezium offsets of a secured cluster and streams on from them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from kafka_security_fixtures import PASSWORD, SCRAM, USER, jaas
from operator_kube_fixtures import wait_for
from test_local_mode_adoption import NAME, debezium_key, debezium_value, insert, write_offsets

from cdcoperator.adoption import Adoption, OffsetScanError, scan_offsets
from cdcoperator.kafkaaccess import KafkaAccess, client_settings, kafka_access, plain_access
from cdcoperator.local.runner import LocalRunner, RunnerThread
from cdcoperator.model import ConnectorResource
from localkafka import KafkaBroker, consume_all
from vtgatesim import VTGateSim
from vtgatesim.workload import Workload

SECRET = "kafka-client"
PROPERTIES = ["sasl.jaas.config", "ssl.truststore.certificates"]
LIBRDKAFKA_LINE = re.compile(r"%\d+\|\d+\.\d+\|")  # librdkafka's stderr format: %level|seconds.ms|FAC|name| text


def body(bootstrap: str, prefix: str = "p", offsets_topic: str = "offsets", secret: bool = True,
         **kafka: Any) -> dict[str, Any]:
    spec_kafka: dict[str, Any] = {"bootstrapServers": bootstrap, "topicPrefix": prefix, "offsetsTopic": offsets_topic,
                                  "securityProtocol": "SASL_SSL", **kafka}
    if secret:
        spec_kafka["securitySecretRef"] = {"name": SECRET, "properties": PROPERTIES}
    return {"apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector",
            "metadata": {"name": NAME, "namespace": "default"},
            "spec": {"source": {"vitess": {"vtgate": "vtgate:15991", "keyspace": "shop"}}, "kafka": spec_kafka,
                     "config": {"sasl.mechanism": "SCRAM-SHA-512", "offset.storage.replication.factor": "1"}}}


def secret_data(ca_pem: str) -> dict[str, bytes]:
    return {"sasl.jaas.config": (jaas(SCRAM) + "\n").encode(), "ssl.truststore.certificates": ca_pem.encode()}


class Forbidden(Exception):
    status = 403


def reader(data: Mapping[str, bytes] | None = None, error: Exception | None = None) -> Any:
    async def read(namespace: str, name: str) -> Mapping[str, bytes] | None:
        assert (namespace, name) == ("default", SECRET)
        if error is not None:
            raise error
        return data

    return read


# --- pure: settings and refusals -----------------------------------------------------------------


def test_the_secret_and_the_spec_make_the_workers_client_settings() -> None:
    cr = ConnectorResource.from_body(body("k:9093"))
    settings = client_settings(cr, secret_data("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"))
    assert settings == {"bootstrap.servers": "k:9093", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                        "sasl.username": USER, "sasl.password": PASSWORD,
                        "ssl.ca.pem": "-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"}
    access = asyncio.run(kafka_access(cr, reader(secret_data("-----BEGIN CERTIFICATE-----\nX\n-----END CERTIFICATE-----\n"))))
    assert access.config == settings and access.problem is None and access.fingerprint
    # A cluster that needs TLS but no Secret (a public CA) is reachable without any grant.
    open_tls = ConnectorResource.from_body(body("k:9093", secret=False, securityProtocol="SSL"))
    assert plain_access(open_tls).config == {"bootstrap.servers": "k:9093", "security.protocol": "SSL",
                                             "sasl.mechanisms": "SCRAM-SHA-512"}


@pytest.mark.parametrize(("read", "problem"), [
    (reader(error=Forbidden("403")), f"needs the credentials in Secret default/{SECRET}, which the operator reads only "
                                     "when installed with rbac.kafkaSecrets=true"),
    (reader(None), f"Secret default/{SECRET} (spec.kafka.securitySecretRef) does not exist"),
    (reader({"sasl.jaas.config": b"x"}), f"Secret default/{SECRET} (spec.kafka.securitySecretRef) has no key "
                                         "ssl.truststore.certificates"),
    (reader({"sasl.jaas.config": b"org.example.Custom required;", "ssl.truststore.certificates": b"pem"}),
     "cannot be used: sasl.jaas.config: login module org.example.Custom is not supported"),
    (reader(error=RuntimeError("connection reset")), "reading Secret default/kafka-client "
                                                     "(spec.kafka.securitySecretRef) failed: connection reset"),
])
def test_refusals_say_what_to_do(read: Any, problem: str) -> None:
    cr = ConnectorResource.from_body(body("k:9093"))
    access = asyncio.run(kafka_access(cr, read))
    assert access.config is None and access.problem is not None and problem in access.problem
    assert PASSWORD not in access.problem


def test_without_the_grant_the_scan_is_skipped_and_offsets_are_kept() -> None:
    from cdcoperator.offsets import delete_offsets_sync  # here: importing it registers kopf handlers

    cr = ConnectorResource.from_body(body("k:9093"))
    skipped = scan_offsets(cr)
    assert skipped.skipped is not None and "rbac.kafkaSecrets=true" in skipped.skipped
    kept = delete_offsets_sync(cr)
    assert kept.startswith(f"offsets of {NAME} in topic offsets were kept: ") and "rbac.kafkaSecrets=true" in kept


# --- a broker that checks passwords ----------------------------------------------------------------


def _access(broker: KafkaBroker, cr: ConnectorResource) -> KafkaAccess:
    assert broker.tls is not None
    return asyncio.run(kafka_access(cr, reader(secret_data(broker.tls.ca.read_text()))))


def test_scan_and_delete_offsets_over_sasl_ssl(secure_kafka_broker: KafkaBroker) -> None:
    from cdcoperator.offsets import delete_offsets_sync

    prefix = f"ka{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}-offsets"
    positions = {"-80": "MySQL56/aaaaaaaa-0000-0000-0000-000000000001:1-5"}
    write_offsets(secure_kafka_broker.bootstrap, topic, [(debezium_key(NAME, prefix, "task0_1_0"), debezium_value(positions)),
                                                   (debezium_key("other", prefix, "task0_1_0"), debezium_value(positions))])
    cr = ConnectorResource.from_body(body(secure_kafka_broker.sasl_ssl_bootstrap, prefix, topic))
    access = _access(secure_kafka_broker, cr)
    adopted = scan_offsets(cr, access=access)
    assert (adopted.generation, adopted.tasks, adopted.keys) == (0, 1, ("task0_1_0",))
    assert delete_offsets_sync(cr, access=access) == f"deleted 1 offset records of {NAME} from topic {topic}"
    assert scan_offsets(cr, access=access) == Adoption()
    left = [r.key for r in consume_all(secure_kafka_broker.bootstrap, topic) if r.value is not None]
    assert debezium_key("other", prefix, "task0_1_0") in left  # another connector's record stays


def test_a_wrong_password_says_authentication_failed_for_the_offsets_reader(
        secure_kafka_broker: KafkaBroker, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    """Issue 28, case 8: the status said ``OffsetsUnreadable ... Local: Broker transport failure``
    (after the scan's whole timeout) while librdkafka printed the reason on stderr ~3 times a
    second. The scan now stops at the refusal and names the client and what to check; librdkafka's
    own lines go through the project's logger, rate-limited."""
    assert secure_kafka_broker.tls is not None
    cr = ConnectorResource.from_body(body(secure_kafka_broker.sasl_ssl_bootstrap, "wp", "wp-offsets"))
    wrong = {"sasl.jaas.config": jaas(SCRAM, "not-the-password").encode(),
             "ssl.truststore.certificates": secure_kafka_broker.tls.ca.read_bytes()}
    access = asyncio.run(kafka_access(cr, reader(wrong)))
    capfd.readouterr()
    with caplog.at_level(logging.DEBUG, logger="cdcworker.kafka"), pytest.raises(OffsetScanError) as caught:
        scan_offsets(cr, timeout=60, access=access)
    message = str(caught.value)
    assert "Kafka refused the connection: authentication failed for the operator's offsets reader (" in message
    assert "check sasl.mechanism and the credentials in sasl.jaas.config" in message
    assert "not-the-password" not in message and "Broker transport failure" not in message
    lines = [r.getMessage() for r in caplog.records if r.name == "cdcworker.kafka"]
    assert lines and all(m.startswith(("librdkafka operator's offsets reader: ", "Kafka refused the connection: "
                                       "authentication failed for the operator's offsets reader (")) for m in lines)
    assert "not-the-password" not in caplog.text
    # No raw librdkafka line about it on stderr (other tests' clients may still print theirs). Only
    # librdkafka's own format counts ("%3|1700000000.123|FAIL|rdkafka#consumer-1| ..."): the project's
    # log line above reaches stderr too when an earlier test in this process gave logging a handler.
    raw = [line for line in capfd.readouterr().err.splitlines() if LIBRDKAFKA_LINE.match(line)]
    assert not [line for line in raw if "authentication" in line.lower()], raw


def test_local_mode_adopts_and_streams_through_a_secured_cluster(tmp_path: Path, secure_kafka_broker: KafkaBroker) -> None:
    """The operator reads the Secret to adopt generation 3's offsets; its workers mount the same
    Secret and stream on from them over SASL_SSL (SCRAM-SHA-512, CA from ssl.truststore.certificates)."""
    assert secure_kafka_broker.tls is not None
    prefix = f"kb{uuid.uuid4().hex[:6]}"
    topic = f"{prefix}-offsets"
    secrets = tmp_path / "secrets" / SECRET
    secrets.mkdir(parents=True)
    for key, value in secret_data(secure_kafka_broker.tls.ca.read_text()).items():
        (secrets / key).write_bytes(value)
    with VTGateSim() as sim:
        sim.create_keyspace("shop", ["-80", "80-"])
        Workload(sim, "shop", table="items").ensure_table()
        insert(sim, range(1, 21))
        stopped_at = sim.positions("shop")
        write_offsets(secure_kafka_broker.bootstrap, topic, [
            (debezium_key(NAME, prefix, "task0_1_3"), debezium_value(stopped_at))])
        insert(sim, range(21, 31))  # written while nothing streamed: must arrive, once
        spec = body(secure_kafka_broker.sasl_ssl_bootstrap, prefix, topic)
        spec["spec"]["source"]["vitess"]["vtgate"] = sim.address
        runner = LocalRunner(spec, tmp_path / "state", secrets_dir=tmp_path / "secrets", resync=1.0,
                             restart_backoff=2.0, control=False)
        with RunnerThread(runner):
            def streaming() -> dict[str, Any] | None:
                status = (runner.cluster.connector("default", NAME) or {}).get("status") or {}
                ready = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
                return status if ready.get("status") == "True" else None

            status = wait_for(streaming, 60, "the first generation streaming")
            assert (status["assignment"]["generation"], status["assignment"]["previousTasks"]) == (4, 1)
            assert status["adoptedOffsets"]["keys"] == ["task0_1_3"]
            final = sim.positions("shop")

            def caught_up() -> bool:
                a = ((runner.cluster.connector("default", NAME) or {}).get("status") or {}).get("assignment") or {}
                (task,) = a.get("taskStates") or ({},)
                return all(f"{shard}@{gtid}" in str(task.get("position")) for shard, gtid in final.items())

            wait_for(caught_up, 60, "the task at the source's final positions")
    changes = sorted(json.loads(r.value)["payload"]["after"]["id"]
                     for r in consume_all(secure_kafka_broker.bootstrap, f"{prefix}.shop.items") if r.value is not None)
    assert changes == list(range(21, 31))  # continued from generation 3: nothing older, nothing twice
    assert [e["reason"] for e in runner.events][:2] == ["AdoptedOffsets", "GenerationStarted"]
