"""Child processes bound to this one: the home of the no-orphans rule for every devkit service.

Kafka, Kafka Connect, etcd, kube-apiserver and test workers all start through ``start_bound``
(own session, SIGKILL when the starting thread dies) and stop through ``stop_group``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

# No Python code may run between fork and exec: a ``preexec_fn`` runs the interpreter's at-fork
# hooks and ctypes in a copy of a threaded process (gRPC, librdkafka), and a lock another thread
# held at fork time hangs that child forever before it execs (seen once in CI: a test worker that
# never started). So the binding is done after exec instead: setpriv (util-linux) sets
# PR_SET_PDEATHSIG, then /bin/sh checks that the parent is still the one that forked it (if it
# died before prctl, no signal would ever come) and execs the real command; setsid is Popen's own,
# done in C. PR_SET_PDEATHSIG fires when the forking *thread* exits, and survives both execs.
# Running as another user goes the same way (``as_ids``), never through Popen's user/group/
# extra_groups: with those CPython forks instead of vforking, and a fork of a process with live
# gRPC threads ran gRPC's at-fork handlers, whose restarted event-engine thread segfaulted the
# child before it could exec (CI: ``vtctldclient`` "failed (-11)" with no output). A credential
# change clears the parent-death signal, so the user is switched first and the signal set after.
_BIND = 'test "$PPID" = "$0" || exit 1; exec "$@"'


def bound_command(args: Sequence[str], parent_pid: int | None = None,
                  as_ids: tuple[int, int] | None = None) -> list[str]:
    """``args`` prefixed so that the child gets SIGKILL when its parent dies and never outlives it;
    run as uid/gid ``as_ids`` with no supplementary groups when given."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError("setpriv (util-linux) is needed to bind child processes: apt-get install util-linux")
    switch = [] if as_ids is None else [
        setpriv, f"--reuid={as_ids[0]}", f"--regid={as_ids[1]}", "--clear-groups", "--"]
    return [*switch, setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c", _BIND,
            str(os.getpid() if parent_pid is None else parent_pid), *map(str, args)]


def start_bound(args: Sequence[str], as_ids: tuple[int, int] | None = None, **popen: Any) -> subprocess.Popen[Any]:  # Any: Popen's keyword arguments and its text or bytes mode, as the caller chooses
    """``subprocess.Popen(args, **popen)`` bound to the calling thread (start it from a long-lived
    one) in a session of its own, so that ``stop_group`` reaches everything it starts; as uid/gid
    ``as_ids`` when given (never pass Popen's ``user``/``group``: see the note above)."""
    return subprocess.Popen(bound_command(args, as_ids=as_ids), start_new_session=True, **popen)


def stop_group(proc: subprocess.Popen[Any], timeout: float = 30.0, kill: bool = False) -> None:  # Any: text or bytes mode, either
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
