"""The real Kafka broker fixture: round trip, transactions, restart."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from localkafka import KafkaBroker, await_markers, consume_all, create_topics, produce


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_round_trip_10000_records_exact(kafka_broker: KafkaBroker) -> None:
    topic = _topic("roundtrip")
    create_topics(kafka_broker.bootstrap, [topic], partitions=3)
    sent = [(f"key-{i}".encode(), f"value-{i}-{'x' * (i % 50)}".encode()) for i in range(10_000)]
    assert produce(kafka_broker.bootstrap, topic, sent) == 10_000

    records = consume_all(kafka_broker.bootstrap, topic)

    assert len(records) == 10_000
    assert sorted((r.key, r.value) for r in records) == sorted(sent)
    # Per-key order is per partition: each partition's offsets are dense from 0.
    for partition in {r.partition for r in records}:
        offsets = [r.offset for r in records if r.partition == partition]
        assert offsets == list(range(len(offsets)))


def test_headers_and_null_values_survive(kafka_broker: KafkaBroker) -> None:
    topic = _topic("headers")
    create_topics(kafka_broker.bootstrap, [topic])
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic, key=b"k1", value=None, headers=[("__debezium.oldkey", b'{"id":1}')])
    producer.produce(topic, key=None, value=b"v2")
    assert producer.flush(30) == 0

    records = consume_all(kafka_broker.bootstrap, topic)

    assert [(r.key, r.value, r.headers) for r in records] == [
        (b"k1", None, (("__debezium.oldkey", b'{"id":1}'),)),
        (None, b"v2", ()),
    ]


def test_read_committed_sees_only_committed_transactions(kafka_broker: KafkaBroker) -> None:
    topic = _topic("txn")
    create_topics(kafka_broker.bootstrap, [topic])
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"t-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"a", value=b"committed")
    producer.commit_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"b", value=b"aborted")
    producer.flush(30)  # written to the log, then aborted (abort alone would just purge the local queue)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"c", value=b"committed-2")
    producer.commit_transaction(30)
    await_markers(kafka_broker.bootstrap, topic)

    committed = consume_all(kafka_broker.bootstrap, topic, read_committed=True)
    everything = consume_all(kafka_broker.bootstrap, topic)

    assert [r.value for r in committed] == [b"committed", b"committed-2"]
    assert b"aborted" in [r.value for r in everything]


def test_open_transaction_is_invisible_to_read_committed(kafka_broker: KafkaBroker) -> None:
    topic = _topic("opentxn")
    create_topics(kafka_broker.bootstrap, [topic])
    produce(kafka_broker.bootstrap, topic, [(b"before", b"1")])
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": f"t-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"pending", value=b"2")
    producer.flush(30)

    assert [r.key for r in consume_all(kafka_broker.bootstrap, topic, read_committed=True)] == [b"before"]
    assert [r.key for r in consume_all(kafka_broker.bootstrap, topic)] == [b"before", b"pending"]
    with pytest.raises(TimeoutError, match="last stable offset 1 < high watermark 2"):
        await_markers(kafka_broker.bootstrap, topic, timeout=1)  # an open transaction has no marker to wait for
    producer.abort_transaction(30)
    await_markers(kafka_broker.bootstrap, topic)  # the abort marker: offset 2, the end 3
    assert [r.key for r in consume_all(kafka_broker.bootstrap, topic, read_committed=True)] == [b"before"]


def test_restart_keeps_data_and_address(fresh_kafka_broker: Callable[[], KafkaBroker]) -> None:
    broker = fresh_kafka_broker()
    address = broker.bootstrap
    topic = _topic("restart")
    create_topics(broker.bootstrap, [topic], partitions=2)
    before = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(500)]
    produce(broker.bootstrap, topic, before)

    broker.stop()
    assert not broker.running
    broker.start()

    assert broker.bootstrap == address
    after = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(500, 600)]
    produce(broker.bootstrap, topic, after)
    records = consume_all(broker.bootstrap, topic)
    assert sorted((r.key, r.value) for r in records) == sorted(before + after)


def test_crash_restart_keeps_acknowledged_records(fresh_kafka_broker: Callable[[], KafkaBroker]) -> None:
    broker = fresh_kafka_broker()
    topic = _topic("crash")
    create_topics(broker.bootstrap, [topic])
    produce(broker.bootstrap, topic, [(b"k", b"acked")])
    pid = broker._proc.pid if broker._proc else None

    broker.restart(kill=True)

    assert pid is not None and not _alive(pid)
    assert [r.value for r in consume_all(broker.bootstrap, topic)] == [b"acked"]


def test_close_leaves_no_jvm(tmp_path: object) -> None:
    broker = KafkaBroker()
    broker.start()
    pid = broker._proc.pid if broker._proc else None
    workdir = broker.workdir
    broker.close()
    assert pid is not None and not _alive(pid)
    assert not workdir.exists()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited if /proc says so.
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_leftover_broker_directories_of_dead_processes_are_removed(tmp_path: Path) -> None:
    """A killed run never reaches close(): its broker data (GBs after a benchmark) is swept by the
    next broker, unless its owner still runs."""
    import subprocess
    import sys

    from localkafka.broker import OWNER_FILE, WORKDIR_PREFIX, remove_stale_workdirs

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    gone, live, old, young = (tmp_path / f"{WORKDIR_PREFIX}{n}" for n in ("gone", "live", "old", "young"))
    for d in (gone, live, old, young):
        (d / "data").mkdir(parents=True)
    (gone / OWNER_FILE).write_text(dead.stdout.decode().strip())
    (live / OWNER_FILE).write_text(str(os.getpid()))
    os.utime(old, (0, 0))  # no owner file, untouched since 1970
    other = tmp_path / "not-ours"
    other.mkdir()
    os.utime(other, (0, 0))
    removed = remove_stale_workdirs(tmp_path)
    assert sorted(removed) == sorted([gone, old])
    assert live.exists() and young.exists() and other.exists() and not gone.exists() and not old.exists()


# A fresh process per broker life: librdkafka writes its log lines to file descriptor 2 from its
# own threads, so only a child's whole stderr shows everything a start, a restart and a stop print.
_QUIET_LIFE = """
from localkafka import KafkaBroker, consume_all, produce
with KafkaBroker() as broker:
    produce(broker.bootstrap, "quiet", [(b"k", b"before")])
    broker.restart()
    produce(broker.bootstrap, "quiet", [(b"k", b"after")])
    print(sorted(r.value.decode() for r in consume_all(broker.bootstrap, "quiet")))
"""


def test_broker_start_restart_and_stop_print_no_librdkafka_lines() -> None:
    """The readiness probe once printed ~40 librdkafka `Connect to ... failed: Connection refused`
    lines per start (its client retried before the listener was up), in the demo too."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _QUIET_LIFE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "['after', 'before']"
    assert proc.stderr == "", proc.stderr[-3000:]
