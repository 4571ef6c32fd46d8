"""The worker's HTTP endpoint: probes flip with the loop's state; ``/status`` has an exact shape."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import grpc
import pytest
from observability_fixtures import T0, FakeClock, http_get, running

from cdcworker.observability import TaskMetrics, serve
from cdcworker.offsets import Vgtid

GTID_A = "MySQL56/0d5cf8e4-1f2a-11ee-9a4d-0242ac120002:1-120"
GTID_B = "MySQL56/5a1b9c33-1f2a-11ee-9a4d-0242ac120003:1-77"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tm(clock: FakeClock) -> TaskMetrics:
    return TaskMetrics("inventory", "task0_2_1", generation=1, clock=clock, liveness_timeout_s=30)


@pytest.fixture
def url(tm: TaskMetrics) -> Iterator[str]:
    with running(tm) as u:
        yield u


def status_code(url: str, path: str) -> int:
    return http_get(url, path)[0]


def test_readyz_follows_connection_and_state(tm: TaskMetrics, url: str) -> None:
    steps: list[tuple[str, bool, int, bytes]] = []

    def probe() -> None:
        code, _, body = http_get(url, "/readyz")
        steps.append((tm.state, tm.connected, code, body))

    probe()  # starting
    tm.set_state("streaming")
    probe()  # streaming but VStream not yet open
    tm.set_connected(True)
    probe()
    tm.set_connected(False)
    tm.on_reconnect(grpc.StatusCode.UNAVAILABLE)
    tm.set_state("reconnecting", "UNAVAILABLE: vtgate went away")
    probe()
    tm.set_connected(True)
    tm.set_state("snapshotting")
    probe()
    tm.set_state("reassignment_needed", "reshard journal 7")
    probe()
    assert steps == [
        ("starting", False, 503, b"fail: starting\n"),
        ("streaming", False, 503, b"fail: streaming but not connected to VTGate\n"),
        ("streaming", True, 200, b"ok: streaming\n"),
        ("reconnecting", False, 503, b"fail: reconnecting (UNAVAILABLE: vtgate went away)\n"),
        ("snapshotting", True, 200, b"ok: snapshotting\n"),
        ("reassignment_needed", True, 503, b"fail: reassignment_needed (reshard journal 7)\n"),
    ]


def test_healthz_fails_when_the_loop_heartbeat_is_stale(tm: TaskMetrics, clock: FakeClock, url: str) -> None:
    assert http_get(url, "/healthz")[::2] == (200, b"ok: loop heartbeat 0.0s ago\n")
    clock.advance(30)
    assert status_code(url, "/healthz") == 200
    clock.advance(1)
    assert http_get(url, "/healthz")[::2] == (503, b"fail: loop heartbeat 31.0s ago exceeds 30s\n")
    tm.beat()
    assert status_code(url, "/healthz") == 200
    clock.advance(29)
    tm.on_response(1)  # every response is a heartbeat too
    clock.advance(29)
    assert status_code(url, "/healthz") == 200
    # Liveness ignores the stream state: a reconnecting loop is alive.
    tm.set_state("reconnecting")
    assert status_code(url, "/healthz") == 200


def test_status_document_exact_shape(tm: TaskMetrics, clock: FakeClock, url: str) -> None:
    read = Vgtid.of("commerce", {"-80": GTID_A, "80-": GTID_B})
    durable = Vgtid.of("commerce", {"-80": GTID_A.replace("1-120", "1-118"), "80-": GTID_B})
    tm.set_position_sources(lambda: read, lambda: durable)
    tm.set_state("streaming")
    tm.set_connected(True)
    sm = tm.shard("-80", "commerce")
    tm.shard("80-", "commerce")  # the loop binds every shard of its start position
    clock.t = T0 + 2.5
    tm.on_response(10, 6)
    sm.on_commit(T0, T0 + 2.5, T0 + 2.5, 6)
    tm.on_sent(6)
    clock.t = T0 + 3
    sm.on_ack(T0)
    tm.on_acked(6)
    clock.t = T0 + 4
    status, headers, body = http_get(url, "/status")
    assert status == 200
    assert headers["content-type"] == "application/json"
    doc = json.loads(body)
    assert doc == {
        "connector": "inventory",
        "task": "task0_2_1",
        "generation": 1,
        "tags": {},
        "state": "streaming",
        "reason": None,
        "state_since_ms": int(T0 * 1000),
        "live": True,
        "ready": True,
        "connected": True,
        "time_ms": int(T0 * 1000) + 4000,
        "events_seen": 6,
        "transactions": 1,
        "records_sent": 6,
        "records_acked": 6,
        "last_event_ms": int(T0 * 1000) + 2500,
        "milliseconds_since_last_event": 1500,
        "low_watermark_ms": None,  # shard 80- has no watermark yet
        "low_watermark_lag_ms": None,
        "latency_ms": {
            # one observation in the (2, 5] bucket: PromQL-style interpolation
            "commit_to_read": {"count": 1, "p50": 3500.0, "p95": 4850.0, "p99": 4970.0},
            "commit_to_emit": {"count": 1, "p50": 3500.0, "p95": 4850.0, "p99": 4970.0},
            "commit_to_ack": {"count": 1, "p50": 3500.0, "p95": 4850.0, "p99": 4970.0},
        },
        "shards": [
            {
                "keyspace": "commerce",
                "shard": "-80",
                "gtid": GTID_A,
                "durable_gtid": GTID_A.replace("1-120", "1-118"),
                "lag_ms": 2500,
                "last_event_ms": int(T0 * 1000) + 2500,
                "last_commit_ms": int(T0 * 1000),
                "transactions": 1,
                "records_sent": 6,
                "low_watermark_ms": int(T0 * 1000),
            },
            {
                "keyspace": "commerce",
                "shard": "80-",
                "gtid": GTID_B,
                "durable_gtid": GTID_B,
                "lag_ms": None,
                "last_event_ms": None,
                "last_commit_ms": None,
                "transactions": 0,
                "records_sent": 0,
                "low_watermark_ms": None,
            },
        ],
        "signals": {"refused": 0, "last_refused": None},
    }
    # Once the idle shard is proven caught up (idleprobe), the task watermark appears.
    tm.on_heartbeat(T0 + 4)
    for shard in ("-80", "80-"):
        tm.mark_idle(shard, T0 + 4)
    doc = json.loads(http_get(url, "/status")[2])
    assert (doc["low_watermark_ms"], doc["low_watermark_lag_ms"]) == (int(T0 * 1000) + 4000, 0)
    assert [s["lag_ms"] for s in doc["shards"]] == [0, 0]  # idle and caught up


def test_status_reports_failure_reason_and_survives_a_broken_position_source(
    tm: TaskMetrics, url: str
) -> None:
    def broken() -> Vgtid:
        raise RuntimeError("processor gone")

    tm.set_position_sources(broken)
    tm.set_state("failed", "PERMISSION_DENIED: no access to keyspace commerce")
    doc = json.loads(http_get(url, "/status")[2])
    assert (doc["state"], doc["reason"], doc["ready"], doc["shards"]) == (
        "failed",
        "PERMISSION_DENIED: no access to keyspace commerce",
        False,
        [],
    )


def test_metrics_route_head_and_unknown_paths(tm: TaskMetrics, url: str) -> None:
    code, headers, body = http_get(url, "/metrics", method="HEAD")
    assert (code, body) == (200, b"")
    assert int(headers["content-length"]) > 1000
    assert http_get(url, "/nope")[:1] == (404,)
    assert http_get(url, "/metrics?name[]=x")[0] == 200


def test_concurrent_scrapes_while_the_loop_writes(tm: TaskMetrics, url: str) -> None:
    """Scrapes run on the server's threads; a loop binding new shards must not break them."""
    failures: list[object] = []

    def scraper() -> None:
        for _ in range(25):
            for path in ("/metrics", "/status"):
                code = status_code(url, path)
                if code != 200:
                    failures.append((path, code))

    threads = [threading.Thread(target=scraper) for _ in range(2)]
    for t in threads:
        t.start()
    i = 0
    while any(t.is_alive() for t in threads):  # keep writing for as long as anyone scrapes
        sm = tm.shard(f"s{i % 200}")  # new shards appear during the first scrapes
        i += 1
        sm.on_commit(T0, T0 + 1, T0 + 1, 1)
        tm.on_response(3, 1)
    for t in threads:
        t.join()
    assert failures == []
    assert len(json.loads(http_get(url, "/status")[2])["shards"]) == min(i, 200)


def test_serve_port_zero_means_disabled(tm: TaskMetrics) -> None:
    assert serve(tm, 0) is None
