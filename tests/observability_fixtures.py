"""Helpers for the observability tests: a settable clock, an HTTP getter and a scrape parser."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client.parser import text_string_to_metric_families

from cdcworker.observability import ObservabilityServer, TaskMetrics

T0 = 1_700_000_000.0  # a round unix time for the fake clock


class FakeClock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t


def http_get(url: str, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    host_port = url.removeprefix("http://")
    conn = http.client.HTTPConnection(host_port, timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample as (name, labels) → value."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def scrape(url: str) -> Samples:
    status, headers, body = http_get(url, "/metrics")
    assert status == 200, body
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(body.decode())


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample whose labels include ``labels`` (exactly one must match), or None if absent."""
    hits = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) <= 1, f"{name} {labels} is ambiguous: {hits}"
    return hits[0] if hits else None


@contextmanager
def running(tm: TaskMetrics) -> Iterator[str]:
    server = ObservabilityServer(tm, 0, host="127.0.0.1").start()
    try:
        yield server.url
    finally:
        server.stop()
