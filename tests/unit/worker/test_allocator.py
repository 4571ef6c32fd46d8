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


LISTING_PROBE = r"""
import ctypes, json, sys
from cdcworker.allocator import tune_for_listing
class MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
libc.mallinfo2.restype = MallInfo2
def mapped():
    return libc.mallinfo2().hblks  # blocks malloc holds as mappings of their own
applied = tune_for_listing()
libc.free(libc.malloc(4 << 20))  # with the dynamic threshold, this raises it past 4 MiB
before = mapped()
p = libc.malloc(4 << 20)
during = mapped()
libc.free(p)
print(json.dumps({"applied": applied, "mapped": during - before, "left": mapped() - before}))
"""


def _listing_probe(**env: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", LISTING_PROBE], check=True, capture_output=True, text=True,
                         env={**{k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}, **env},
                         timeout=60)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def test_the_operator_maps_each_large_buffer_and_returns_it() -> None:
    # A list's parse buffer after one like it was freed: its own mapping, gone on free (tuned), or
    # carved from the heap, where it stays (glibc's dynamic threshold).
    assert _listing_probe() == {"applied": True, "mapped": 1, "left": 0}
    assert _listing_probe(SHARDCDC_MALLOC_TUNING="0") == {"applied": False, "mapped": 0, "left": 0}
    assert _listing_probe(MALLOC_MMAP_THRESHOLD_="65536")["applied"] is False  # the user's own setting stands
