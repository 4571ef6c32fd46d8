"""The producing process's malloc thresholds (cdcworker.allocator): produce-request-sized buffers
written and freed over and over (librdkafka's broker thread does this per batch) fault their pages
in once when the thresholds are set, and every round with glibc's defaults (memory given back and
taken again). Each case runs in a fresh interpreter: the settings are process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

PROBE = r"""
import ctypes, json, resource, sys
from cdcworker.allocator import tune_for_producing
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
SIZE = 1 << 20
def rounds(n):
    # faults of n rounds of a produce request and its compressed copy, written and freed
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        bufs = [libc.malloc(SIZE) for _ in range(2)]
        for p in bufs:
            ctypes.memset(p, 1, SIZE)
        for p in bufs:
            libc.free(p)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
applied = tune_for_producing()
rounds(2)  # warm: the first buffers fault in either way
print(json.dumps({"applied": applied, "faults": rounds(20)}))
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc (Linux) only")


def _probe(**env: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=60)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


ROUND_PAGES = 2 * (1 << 20) // 4096  # the pages of one round: two 1 MiB buffers


def test_batch_buffers_are_reused_once_tuned() -> None:
    r = _probe()
    assert r["applied"] is True
    assert r["faults"] < ROUND_PAGES  # 20 rounds: none of them faults its buffers in again


def test_the_user_can_keep_the_default_allocator() -> None:
    r = _probe(SHARDCDC_MALLOC_TUNING="0")
    assert r["applied"] is False
    assert r["faults"] > 10 * ROUND_PAGES  # glibc's defaults: the pages come back nearly every round
