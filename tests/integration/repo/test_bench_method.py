"""The streaming benchmark's measurement helpers: the broker JIT's CPU (what decides how long the
warm-up lasts) and the confidence interval reported beside each median of paired runs."""

from __future__ import annotations

import os
import statistics

from test_bench_replay import _load

from localkafka.broker import KafkaBroker


def test_jit_cpu_counts_the_brokers_compiler_threads_only(kafka_broker: KafkaBroker) -> None:
    streaming = _load("streaming")
    pid = streaming._pid_of(kafka_broker)
    assert pid is not None
    jit = streaming._jit_cpu(pid)
    # A started broker has compiled its start-up paths (the test JVM runs C1), and that is a
    # part of its CPU, not all of it.
    assert 0 < jit < streaming._proc_cpu(pid)
    assert streaming._jit_cpu(os.getpid()) == 0.0  # CPython has no compiler threads


def test_median_ci_brackets_the_median_and_narrows_with_more_pairs() -> None:
    streaming = _load("streaming")
    few = [-0.24, -0.05, -0.10, -0.31, 0.0, -0.10, -0.08]
    lo, hi = streaming.median_ci(few)
    assert lo <= statistics.median(few) <= hi
    assert (lo, hi) == streaming.median_ci(few)  # seeded: a report reproduces
    many = few * 4
    lo4, hi4 = streaming.median_ci(many)
    assert lo4 <= statistics.median(many) <= hi4
    assert hi4 - lo4 < hi - lo
    assert streaming.median_ci([-0.1] * 5) == (-0.1, -0.1)
