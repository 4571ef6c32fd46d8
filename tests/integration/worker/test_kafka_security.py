"""Kafka security as Debezium users configure it: Java client names, translated for librdkafka,
against a real broker that checks passwords (SASL PLAIN and SCRAM-SHA-512) and serves TLS.

A Kafka Connect deployment carries ``sasl.jaas.config`` and Java trust stores; librdkafka refuses
both outright, so a worker given them used to fail at its first producer. The pure translation is
tested case by case; the broker tests run the worker, ``shardcdc offsets`` and the failure paths
(a refused password, an untrusted certificate) end to end.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka_security_fixtures import PASSWORD, PLAIN, SCRAM, USER, jaas, pkcs12_truststore
from worker_fixtures import commerce_sim, insert_customers, running_task, wait_for, worker_config

from cdcworker import exitcodes
from cdcworker.config import ConfigError, load_config
from cdcworker.config.kafkaclient import ClientSettingError, librdkafka_settings, parse_jaas
from cdcworker.kafkaerrors import ClientLog
from cdcworker.offsets import OffsetPartition, OffsetValue, Vgtid, offset_record_key
from localkafka import KafkaBroker, consume_all
from shardcdc_cli import cli

# --- the translation (pure) ----------------------------------------------------------------------


def test_jaas_login_modules_become_librdkafka_credentials() -> None:
    assert librdkafka_settings({"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas(SCRAM)}) == {
        "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER, "sasl.password": PASSWORD}
    assert librdkafka_settings({"sasl.jaas.config": jaas(PLAIN)}) == {"sasl.username": USER, "sasl.password": PASSWORD}
    oauth = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId="app" '
             'clientSecret="x y" scope="kafka";')
    assert librdkafka_settings({"sasl.jaas.config": oauth, "sasl.login.callback.handler.class": "a.B",
                                "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}) == {
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "app", "sasl.oauthbearer.client.secret": "x y",
        "sasl.oauthbearer.scope": "kafka", "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}


def test_jaas_values_keep_quotes_escapes_and_spaces() -> None:
    module, options = parse_jaas(f'{PLAIN}   required\n  username=bare password="a \\"b\\" ;c";  ')
    assert module == PLAIN
    assert options == {"username": "bare", "password": 'a "b" ;c'}


@pytest.mark.parametrize(("text", "message"), [
    ("org.example.CustomLoginModule required token=abc;", "login module org.example.CustomLoginModule is not supported"),
    (f'{SCRAM} required username="u";', f"{SCRAM} needs password"),
    ("just text", "expected '<LoginModule> required"),
    (f'{PLAIN} required username="u" password "hunter2";', f"cannot read option 2 of {PLAIN}"),
    ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k" principal="a@B";',
     "Kerberos (GSSAPI) is not supported"),
])
def test_unsupported_jaas_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ClientSettingError, match=re.escape("sasl.jaas.config")) as err:
        librdkafka_settings({"sasl.jaas.config": text})
    assert message in err.value.message
    assert "hunter2" not in str(err.value)


def test_trust_and_key_stores(tmp_path: Path) -> None:
    from localkafka.security import make_tls

    tls = make_tls(tmp_path / "tls")
    ca_text = tls.ca.read_text()
    # PEM: by type, or recognised from the file when the type is left out (Java would assume JKS).
    assert librdkafka_settings({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(tls.ca)}) == {
        "ssl.ca.location": str(tls.ca)}
    assert librdkafka_settings({"ssl.truststore.location": str(tls.ca), "ssl.truststore.password": "x"}) == {
        "ssl.ca.location": str(tls.ca)}
    assert librdkafka_settings({"ssl.truststore.certificates": ca_text}) == {"ssl.ca.pem": ca_text}
    # PKCS12: its certificates are read here, since librdkafka reads no trust store.
    store = pkcs12_truststore(tls.ca, tmp_path / "trust.p12", "changeit")
    assert librdkafka_settings({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(store),
                                "ssl.truststore.password": "changeit"}) == {"ssl.ca.pem": ca_text}
    with pytest.raises(ClientSettingError, match=re.escape("ssl.truststore.location: cannot read the PKCS12 trust store")):
        librdkafka_settings({"ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(store),
                             "ssl.truststore.password": "wrong"})
    # Key stores: PKCS12 is librdkafka's own; a PEM file holds the key and the chain.
    assert librdkafka_settings({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
                                "ssl.keystore.password": "p"}) == {"ssl.keystore.location": "/k.p12",
                                                                   "ssl.keystore.password": "p"}
    assert librdkafka_settings({"ssl.keystore.location": str(tls.server), "ssl.key.password": "k"}) == {
        "ssl.certificate.location": str(tls.server), "ssl.key.location": str(tls.server), "ssl.key.password": "k"}
    assert librdkafka_settings({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": "C",
                                "ssl.keystore.key": "K"}) == {"ssl.certificate.pem": "C", "ssl.key.pem": "K"}
    # JKS (by type or by its magic number) cannot be read without a JVM: say how to convert it.
    jks = tmp_path / "trust.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    for settings in ({"ssl.truststore.location": str(jks)},
                     {"ssl.truststore.type": "JKS", "ssl.truststore.location": "/missing.jks"}):
        with pytest.raises(ClientSettingError, match=re.escape("ssl.truststore.location: librdkafka cannot read JKS")) as err:
            librdkafka_settings(settings)
        assert "keytool -importkeystore" in err.value.message
    with pytest.raises(ClientSettingError, match=re.escape("ssl.keystore.location: librdkafka cannot read JKS")):
        librdkafka_settings({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/k.jks"})


def test_java_only_settings_are_dropped_and_hostname_checks_map() -> None:
    assert librdkafka_settings({"ssl.protocol": "TLSv1.3", "ssl.enabled.protocols": "TLSv1.3",
                                "sasl.login.refresh.window.factor": "0.8", "ssl.endpoint.identification.algorithm": "",
                                "security.protocol": "SASL_SSL", "linger.ms": "5"}) == {
        "ssl.endpoint.identification.algorithm": "none", "security.protocol": "SASL_SSL", "linger.ms": "5"}


def test_the_worker_config_rejects_a_jks_store_at_load_time(tmp_path: Path) -> None:
    jks = tmp_path / "client.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed")
    props = {"name": "c", "topic.prefix": "p", "database.hostname": "h", "vitess.keyspace": "ks",
             "bootstrap.servers": "k:9092", "security.protocol": "SSL", "ssl.truststore.location": str(jks),
             "producer.sasl.jaas.config": "nonsense"}
    with pytest.raises(ConfigError) as err:
        load_config([], env={}, overrides=props)
    messages = err.value.messages
    assert any(m.startswith("ssl.truststore.location: librdkafka cannot read JKS") for m in messages), messages
    assert any(m.startswith("sasl.jaas.config: expected '<LoginModule> required") for m in messages), messages
    assert "nonsense" not in str(err.value)  # a secret's value is never echoed


# --- against a broker that checks passwords and serves TLS ----------------------------------------


def _secret_file(tmp_path: Path, text: str) -> Path:
    """What the operator mounts from the Secret named by spec.kafka.securitySecretRef."""
    path = tmp_path / "secrets" / "sasl.jaas.config"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _secured(broker: KafkaBroker, tmp_path: Path, mode: str, password: str = PASSWORD) -> dict[str, str]:
    """Connect-style settings (Java names, the JAAS line from a file provider) for one listener."""
    assert broker.tls is not None
    common = {"config.providers": "file",
              "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider"}
    if mode == "sasl_ssl_scram":
        secret = _secret_file(tmp_path, jaas(SCRAM, password))
        store = pkcs12_truststore(broker.tls.ca, tmp_path / "truststore.p12", "changeit")
        return {**common, "bootstrap.servers": broker.sasl_ssl_bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": f"${{file:{secret}}}",
                "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(store),
                "ssl.truststore.password": "changeit"}
    secret = _secret_file(tmp_path, jaas(PLAIN, password))
    return {**common, "bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.jaas.config": f"${{file:{secret}}}"}


@pytest.mark.parametrize(("mode", "extra"), [
    ("sasl_ssl_scram", {"exactly.once.support": "required"}),
    ("sasl_plaintext_plain", {}),
])
def test_the_worker_streams_through_an_authenticated_listener(
    secure_kafka_broker: KafkaBroker, tmp_path: Path, mode: str, extra: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with commerce_sim(customers=5) as sim:
        cfg = worker_config(secure_kafka_broker, sim.address, "commerce",
                            extra={**_secured(secure_kafka_broker, tmp_path, mode), "snapshot.mode": "initial", **extra})
        with running_task(cfg) as run:
            wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 5, what="the 5 snapshot rows")
            insert_customers(sim, range(6, 9))
            wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 8, what="3 streamed rows")
            result = run.stop()
        assert result.exit_code == 0, result.reason
        final = sim.positions("commerce")
    # Read back over the open listener: every row once, in order per key, and the offset stored.
    committed = extra.get("exactly.once.support") == "required"
    records = consume_all(secure_kafka_broker.bootstrap, f"{cfg.topic_prefix}.commerce.customer", read_committed=committed)
    ids = sorted(json.loads(r.key or b"")["payload"]["id"] for r in records)
    assert ids == list(range(1, 9))
    # The copy's rows arrive as inserts, as Debezium Vitess emits a VStream copy.
    assert [json.loads(r.value or b"")["payload"]["op"] for r in records] == ["c"] * 8
    key = offset_record_key(cfg.name, OffsetPartition(cfg.topic_prefix))
    stored = [r for r in consume_all(secure_kafka_broker.bootstrap, cfg.kafka.offsets_topic, read_committed=committed)
              if r.key == key]
    assert {sg.shard: sg.gtid for sg in OffsetValue.from_bytes(stored[-1].value or b"").vgtid} == final
    assert PASSWORD not in caplog.text  # credentials never reach the logs


@pytest.mark.parametrize(("breakage", "expected"), [
    ("password", "SASL authentication error"),
    ("trust", "certificate verify failed"),
])
def test_refused_credentials_or_certificate_stop_the_worker_with_the_reason(
    secure_kafka_broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breakage: str, expected: str
) -> None:
    termination = tmp_path / "termination-log"
    monkeypatch.setenv("SHARDCDC_TERMINATION_LOG", str(termination))
    settings = _secured(secure_kafka_broker, tmp_path, "sasl_ssl_scram", "not-the-password" if breakage == "password" else PASSWORD)
    if breakage == "trust":
        for key in ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password"):
            settings.pop(key)
    with commerce_sim() as sim:
        cfg = worker_config(secure_kafka_broker, sim.address, "commerce", extra=settings)
        with running_task(cfg) as run:
            result = run.wait()
    hint = "sasl.jaas.config" if breakage == "password" else "trust store"
    failed = "authentication" if breakage == "password" else "the TLS handshake"
    assert f"{failed} failed for the offsets admin client (" in result.reason, result.reason  # the first client
    assert result.exit_code == exitcodes.FAILED
    assert result.reason.startswith("Kafka refused the connection: ") and expected in result.reason, result.reason
    assert hint in result.reason
    assert json.loads(termination.read_text()) == {"error": result.reason}  # what the operator reports


def test_librdkafka_lines_are_logged_once_per_kind_per_period(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    log = ClientLog("offsets consumer", every=30.0, clock=lambda: now[0])
    with caplog.at_level(logging.DEBUG, logger="cdcworker.kafka"):
        for _ in range(90):  # 30 s of a login refused 3 times a second
            log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "SASL authentication error")
            log.log(logging.WARNING, "%s [%s] %s", "SASL", "rdkafka#consumer-1", "retrying")
            now[0] += 1 / 3
        now[0] = 30.0
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "SASL authentication error")
    # A refused login is the one clear line naming the client and what to check (issue 28, case 8).
    refused = ("Kafka refused the connection: authentication failed for the offsets consumer (SASL authentication "
               "error); check sasl.mechanism and the credentials in sasl.jaas.config (the Secret named by "
               "spec.kafka.securitySecretRef)")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, refused),
        (logging.WARNING, "librdkafka offsets consumer: SASL [rdkafka#consumer-1] retrying"),
        (logging.ERROR, refused + " (89 more like it in the last 30 s)"),
    ]


def test_offsets_cli_takes_a_kafka_command_config_file(
    secure_kafka_broker: KafkaBroker, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--command-config`` takes the client.properties a Kafka CLI user already has (Java names)."""
    from cdcworker.offsets.store import OffsetStore

    monkeypatch.setenv("COLUMNS", "200")
    settings = _secured(secure_kafka_broker, tmp_path, "sasl_ssl_scram")
    client = tmp_path / "client.properties"
    jaas_line = jaas(SCRAM)
    client.write_text("".join(f"{k}={v}\n" for k, v in {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": jaas_line,
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": settings["ssl.truststore.location"],
        "ssl.truststore.password": "changeit"}.items()))
    topic = f"offsets-{tmp_path.name[-12:]}"
    name, gtid = "orders", "MySQL56/aaaaaaaa-0000-0000-0000-000000000001:1-9"
    with OffsetStore({"bootstrap.servers": secure_kafka_broker.bootstrap}, topic, partitions=1, replication_factor=1) as store:
        store.ensure_topic()
        store.write(name, OffsetPartition.for_task(name, 0, 1, 0), OffsetValue.build(Vgtid.of("ks", {"-80": gtid})))
    rc = cli.main(["offsets", "list", name, "--local", "--bootstrap-servers", secure_kafka_broker.sasl_ssl_bootstrap,
                   "--offsets-topic", topic, "--command-config", str(client), "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    document: Any = json.loads(out.out)
    assert gtid in json.dumps(document)
    assert PASSWORD not in out.out + out.err


# --- access withdrawn while streaming ------------------------------------------------------------


@pytest.fixture(scope="module")
def reauth_broker() -> Iterator[KafkaBroker]:
    """A secured broker that makes every SASL connection log in again every 1.5 s (KIP-368's
    ``connections.max.reauth.ms``, as clusters that rotate credentials set it)."""
    from localkafka import BrokerSecurity

    broker = KafkaBroker(security=BrokerSecurity({USER: PASSWORD}), extra_config={"connections.max.reauth.ms": "1500"})
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def _set_scram_password(broker: KafkaBroker, user: str, password: str) -> None:
    """Create or change a SCRAM-SHA-512 user, as ``kafka-configs --alter --entity-type users`` does."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    for future in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(user, info, password.encode())]).values():
        future.result(30)


@pytest.mark.parametrize(("extra", "sink"), [({}, "native"), ({"exactly.once.support": "required"}, "native"),
                                            ({}, "confluent")], ids=["at-least-once", "exactly-once", "confluent-sink"])
def test_credentials_withdrawn_mid_stream_stop_the_worker_at_once_and_lose_nothing(
    reauth_broker: KafkaBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: dict[str, str], sink: str
) -> None:
    """A password changed on the cluster while the worker streams: its next login is refused.

    librdkafka retries a refused login for ever and keeps the records until ``message.timeout.ms``
    (5 minutes), so the worker used to look healthy and then fail on timed-out records. It now
    stops at the refusal, with the reason in its termination message (the operator's ``Failed``
    message), and never stores an offset past what Kafka holds: restarted with the new password,
    it delivers every row.
    """
    from cdcworker.events import native

    if sink == "confluent":
        monkeypatch.setenv(native.ENV, "encoder")  # confluent-kafka's producer behind the native encoder
    user = f"rotating-{'eos' if extra else 'alo'}-{sink}"
    _set_scram_password(reauth_broker, user, "first-pw")
    termination = tmp_path / "termination-log"
    monkeypatch.setenv("SHARDCDC_TERMINATION_LOG", str(termination))
    secret = _secret_file(tmp_path, jaas(SCRAM, "first-pw", user))
    settings = {"bootstrap.servers": reauth_broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": f"${{file:{secret}}}",
                "config.providers": "file",
                "config.providers.file.class": "org.apache.kafka.common.config.provider.FileConfigProvider",
                "snapshot.mode": "initial", **extra}
    prefix = f"p{tmp_path.name[-10:].replace('_', '')}"
    with commerce_sim(customers=5) as sim:
        cfg = worker_config(reauth_broker, sim.address, "commerce", prefix=prefix, extra=settings)
        with running_task(cfg) as run:
            wait_for(lambda: run.task.sink is not None and run.task.sink.records_sent >= 5, what="the 5 snapshot rows")
            assert type(run.task.sink).__name__.startswith("Native") == (sink == "native")
            insert_customers(sim, range(6, 9))
            wait_for(lambda: run.task.sink is not None and run.task.sink.durable is not None
                     and run.task.sink.pending == 0 and run.task.sink.records_sent >= 8, what="3 streamed rows acknowledged")
            _set_scram_password(reauth_broker, user, "second-pw")
            insert_customers(sim, range(9, 12))
            # Well inside message.timeout.ms (300 s): the refusal, not a record timeout, stops it.
            result = run.wait(60)
        assert result.exit_code == exitcodes.FAILED
        assert result.reason.startswith("Kafka refused the connection: "), result.reason
        assert "SASL authentication error" in result.reason and "sasl.jaas.config" in result.reason
        assert json.loads(termination.read_text()) == {"error": result.reason}
        assert run.task.metrics is not None and run.task.metrics.state == "failed"
        # The Secret updated to the new password: a restart resumes and nothing is lost.
        secret.write_text(jaas(SCRAM, "second-pw", user))
        cfg = worker_config(reauth_broker, sim.address, "commerce", prefix=prefix, extra=settings)
        with running_task(cfg) as run:
            wait_for(lambda: run.task.processor is not None and run.task.sink is not None
                     and run.task.sink.pending == 0 and {sg.shard: sg.gtid for sg in run.task.processor.position}
                     == sim.positions("commerce"), what="the restarted worker caught up")
            again = run.stop()
        assert again.exit_code == 0, again.reason
    committed = bool(extra)
    records = consume_all(reauth_broker.bootstrap, f"{prefix}.commerce.customer", read_committed=committed)
    ids = [json.loads(r.key or b"")["payload"]["id"] for r in records]
    assert sorted(set(ids)) == list(range(1, 12))  # every row, the ones refused included
    if committed:
        assert sorted(ids) == list(range(1, 12))  # exactly-once: each once
