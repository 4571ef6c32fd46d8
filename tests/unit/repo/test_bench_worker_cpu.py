"""The worker benchmark's CPU figure (``bench/streaming.py``, ``worker_cpu``): the process's CPU
between the first event and done, without what the benchmark's own monitor thread (inside the
worker process) used over the same window, which is reported apart."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[3] / "bench"


def _streaming() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_streaming_cpu", BENCH / "streaming.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _burn(cpu_seconds: float) -> None:
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


def test_the_monitor_threads_cpu_is_left_out_of_the_workers_and_reported_apart() -> None:
    worker_cpu = _streaming().worker_cpu
    marks: dict[str, float] = {}

    def monitor() -> None:  # as worker_main's: marks the window with its own thread_time
        marks["cpu_first"], marks["harness_first"] = time.process_time(), time.thread_time()
        _burn(0.3)  # the monitor's sampling
        started.set()
        work_done.wait(30)
        marks["cpu_done"], marks["harness_done"] = time.process_time(), time.thread_time()

    started, work_done = threading.Event(), threading.Event()
    thread = threading.Thread(target=monitor)
    thread.start()
    assert started.wait(30)
    main0 = time.thread_time()
    _burn(0.2)  # the worker's own work
    main = time.thread_time() - main0
    work_done.set()
    thread.join(30)
    cpu, harness = worker_cpu(marks)
    assert 0.3 <= harness < 0.35
    assert main <= cpu < main + 0.05  # the worker's work (and this test's few lines), not the monitor's


def test_without_marks_the_figures_are_zero() -> None:
    assert _streaming().worker_cpu({}) == (0, 0)
