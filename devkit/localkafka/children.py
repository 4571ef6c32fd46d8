"""Child processes bound to this one: the home of the no-orphans rule for every devkit service.

Kafka, Kafka Connect, etcd, kube-apiserver and test workers all start through ``bound_preexec``
(own session, SIGKILL when this process dies) and stop through ``stop_group``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import signal
import subprocess
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
# Loaded once in the parent: dlopen between fork and exec can deadlock in a threaded process.
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True)


def _die_with_parent(parent_pid: int) -> None:
    """Runs in the child before exec: SIGKILL on parent death, own session so killpg reaches it all."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:
        # The parent died between fork and prctl: the signal will never come, so do not exec at all.
        os._exit(1)
    os.setsid()


def bound_preexec() -> Callable[[], None]:
    """A ``preexec_fn`` binding the child to the calling process (start it from a long-lived thread:
    PR_SET_PDEATHSIG fires when the forking *thread* exits)."""
    return functools.partial(_die_with_parent, os.getpid())


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 30.0, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL) the child's process group, SIGKILL it after ``timeout``; a reaped leader
    is left alone (its pid, and so the group id, may already belong to someone else)."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
