"""The operator fixes glibc's mmap threshold: a large block is then mapped and unmapped on free
instead of staying in the heap."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_fixed_threshold_returns_large_blocks_to_the_system() -> None:
    # In a child process: the setting is process-wide. A 4 MiB block freed raises glibc's dynamic
    # threshold, so a second one comes from the heap (no new mapping); with the threshold fixed,
    # each is a mapping of its own, gone on free.
    script = textwrap.dedent("""
        import ctypes, sys
        from cdcoperator.memory import fix_mmap_threshold
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        def maps():
            return sum(1 for _ in open("/proc/self/maps"))
        if sys.argv[1] == "fixed":
            assert fix_mmap_threshold()
        libc.free(libc.malloc(4 << 20))
        before = maps()
        p = libc.malloc(4 << 20)
        during = maps()
        libc.free(p)
        print(during - before, maps() - before)
    """)
    def run(mode: str) -> str:
        return subprocess.run([sys.executable, "-c", script, mode], check=True, capture_output=True,
                              text=True).stdout.split()
    assert run("fixed") == ["1", "0"]
    assert run("dynamic") == ["0", "0"]
