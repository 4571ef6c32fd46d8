"""glibc malloc settings for a process that produces to Kafka at a high rate (every ``KafkaSink``
sets them when it is made, and each backfill lane for its own producer).

librdkafka builds each produce request in a fresh buffer of up to ``batch.size`` (1 MB by default
here) in its broker thread and frees it once the broker has answered. With glibc's defaults such a
buffer starts out as its own ``mmap`` (the threshold begins at 128 KiB and rises only as mapped
blocks are freed), and free memory at the top of a heap beyond a small trim threshold goes back to
the kernel, so batch after batch faults its pages in again and the kernel zeroes them: in a `perf`
profile of the streaming benchmark that was ~15 % of the producer thread's CPU
(``exc_page_fault``, ``clear_page_erms``; BENCHMARKS.md, "malloc thresholds"). Raising
both thresholds just past one request and its compressed copy keeps those buffers in the heap for
reuse. Larger values were measured and rejected: 4 MiB / 32 MiB (and 4 / 8) kept VStream-sized
buffers in the heap too and raised the worker's peak RSS in a 1,000,000-row transaction by ~20 MB
(median), close to its 200 MB target; 2 / 4 MiB left it where it was.

The operator (``tune_for_listing``) has the opposite problem: it decodes lists of megabytes (a
connector's Deployments) every reconcile, and glibc raises its mmap threshold to the size of each
mapped block freed (up to 32 MiB), so from then on those parse buffers come from the heap and stay
in it, fragmented by the small objects allocated between them. Holding 10 connectors of 256 tasks
(``bench/operator_hold.py``) its RSS was 291 MiB with the dynamic threshold and 218 MiB with the
threshold fixed at 1 MiB (issue 30). The setting is the process's: librdkafka's buffers over 1 MiB
in the operator (an offsets scan, a backfill feed) are then mapped each time too, a CPU cost off
the reconcile's path.

``SHARDCDC_MALLOC_TUNING=0`` leaves the allocator as it is. Not glibc (musl, macOS): nothing done.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from collections.abc import Callable
from typing import cast

__all__ = ["ENV", "LISTING_MMAP_THRESHOLD", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "tune_for_listing",
           "tune_for_producing"]

log = logging.getLogger(__name__)

ENV = "SHARDCDC_MALLOC_TUNING"
# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# Above a produce request (batch.size, 1 MB, plus framing) and its lz4 copy; larger blocks (big
# VStream responses) still get their own mapping and go back at once.
MMAP_THRESHOLD = 2 << 20
# Freed memory kept at the top of a heap for reuse: the two buffers of a batch in flight.
TRIM_THRESHOLD = 4 << 20
# The operator's: a list's parse buffers (megabytes) mapped and unmapped, never kept in the heap.
LISTING_MMAP_THRESHOLD = 1 << 20


def _mallopt() -> Callable[[int, int], int] | None:
    """glibc's ``mallopt``; None when tuning is switched off or the libc is another."""
    if os.environ.get(ENV, "1") == "0":
        return None
    try:
        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):
            return None  # mallopt elsewhere is a no-op or means something else
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return cast("Callable[[int, int], int]", mallopt)


@functools.cache
def tune_for_producing() -> bool:
    """Apply the thresholds once per process; True when glibc took them."""
    mallopt = _mallopt()
    if mallopt is None:
        return False
    applied: bool = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    log.debug("malloc thresholds for producing: mmap %d, trim %d (%s)", MMAP_THRESHOLD, TRIM_THRESHOLD,
              "applied" if applied else "refused")
    return applied


def tune_for_listing() -> bool:
    """Fix the mmap threshold at ``LISTING_MMAP_THRESHOLD`` (the operator process); True when glibc
    took it. A ``MALLOC_MMAP_THRESHOLD_`` of the user's own stands."""
    mallopt = _mallopt()
    if mallopt is None or "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    return mallopt(_M_MMAP_THRESHOLD, LISTING_MMAP_THRESHOLD) == 1
