"""Every librdkafka client the product makes logs through the project's logger (issue 28, case 8).

Without a ``logger`` librdkafka prints its own lines on stderr (``%3|...|FAIL|rdkafka#consumer-1|
...``) about three a second while a broker is unreachable or refuses the login: the signal
consumer, the topic creator, the backfill clients and the native producer did. Now every client is
made by ``cdcworker.kafkaclients`` (the native producer keeps librdkafka's lines in C for the
worker to log), rate-limited, and a refused login is one line naming the client and what to check.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from localkafka import KafkaBroker

ROOT = Path(__file__).resolve().parents[3]
PRODUCT = [ROOT / "worker" / "cdcworker", ROOT / "operator" / "cdcoperator"]
CLIENT_CLASSES = {"Producer", "Consumer", "AdminClient"}
HOME = ROOT / "worker" / "cdcworker" / "kafkaclients.py"


def _constructions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            if name in CLIENT_CLASSES and owner != "rowenc" and not (isinstance(func, ast.Attribute)
                                                                       and getattr(func.value, "attr", "") == "rowenc"):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(func)}(...)")
    return out


def test_product_code_makes_librdkafka_clients_only_in_kafkaclients() -> None:
    found = [c for base in PRODUCT for p in sorted(base.rglob("*.py")) if p != HOME for c in _constructions(p)]
    assert found == [], "make these clients with cdcworker.kafkaclients.producer/consumer/admin:\n" + "\n".join(found)
    assert _constructions(HOME), "the scan sees the constructions where they are"


# Each kind of client, made as the product makes it, against ``BOOTSTRAP`` with ``SETTINGS``; the
# native producer through the worker's sink class. Runs in its own process: stderr is its own.
_SCRIPT = textwrap.dedent("""
    import json, logging, os, sys, time
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
    from cdcworker import kafkaclients
    from cdcworker.nativesink import NativeKafkaSink
    conf = {"bootstrap.servers": os.environ["BOOTSTRAP"], **json.loads(os.environ["SETTINGS"])}
    consumer = kafkaclients.consumer({**conf, "group.id": "g"}, "signal consumer")
    consumer.subscribe(["signals"])
    admin = kafkaclients.admin(conf, "topic creator")
    producer = kafkaclients.producer(conf, "backfill producer")
    producer.produce("t", b"v")
    sink = NativeKafkaSink(dict(conf))
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        consumer.poll(0.2)
        producer.poll(0.2)
        sink._refusal()
    try:
        admin.list_topics(timeout=1)
    except Exception:
        pass
    consumer.close()
""")


def _run_clients(bootstrap: str, settings: dict[str, str]) -> subprocess.CompletedProcess[str]:
    import json

    env = {**os.environ, "BOOTSTRAP": bootstrap, "SETTINGS": json.dumps(settings)}
    return subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, env=env)


def _native_available() -> bool:
    from cdcworker.events import native

    return native.rowenc is not None and hasattr(native.rowenc, "Producer")


def test_an_unreachable_broker_prints_no_raw_librdkafka_lines() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _run_clients(f"127.0.0.1:{port}", {})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "%3|" not in r.stderr and "|FAIL|" not in r.stderr, r.stderr[-3000:]
    # The lines are in the project's log instead, each client named, rate-limited (one per kind).
    for client in ("signal consumer", "backfill producer", "producer"):
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith(f"cdcworker.kafka ERROR librdkafka {client}: FAIL")]
        assert 1 <= len(lines) <= 2, r.stdout[-3000:]
    assert _native_available()


def test_a_wrong_password_is_one_clear_line_per_client_and_nothing_raw(secure_kafka_broker: KafkaBroker) -> None:
    settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "shardcdc", "sasl.password": "not-the-password"}
    r = _run_clients(secure_kafka_broker.sasl_bootstrap, settings)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "%3|" not in r.stderr and "authentication" not in r.stderr.lower(), r.stderr[-3000:]
    for client in ("signal consumer", "backfill producer", "producer"):
        lines = [ln for ln in r.stdout.splitlines()
                 if f"Kafka refused the connection: authentication failed for the {client} (" in ln]
        assert len(lines) == 1, (client, r.stdout[-3000:])
        assert "check sasl.mechanism and the credentials in sasl.jaas.config" in lines[0]
    assert "not-the-password" not in r.stdout
