"""The operator process's malloc settings (glibc).

glibc serves an allocation of at least the mmap threshold with its own ``mmap`` and returns it on
``free``, but raises that threshold to the size of each such block freed (up to 32 MiB), so from
then on the decoder's multi-megabyte buffers for each Deployment list come from the heap and stay
in it, fragmented by the small objects allocated between them. Holding 10 connectors of 256 tasks
(``bench/operator_hold.py``) the operator's RSS was 291 MiB with the dynamic threshold and 218 MiB
with it fixed at 1 MiB (issue 30).
"""

from __future__ import annotations

import ctypes
import ctypes.util

__all__ = ["MMAP_THRESHOLD", "fix_mmap_threshold"]

M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)
MMAP_THRESHOLD = 1 << 20


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's mmap threshold (what ``MALLOC_MMAP_THRESHOLD_`` does); False where there is no
    glibc ``mallopt`` (another libc: its defaults stand)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        return False
    return bool(mallopt and mallopt(M_MMAP_THRESHOLD, threshold) == 1)
