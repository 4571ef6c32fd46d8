"""Bound child processes (``cdcoperator.local.children``): no Python between fork and exec, no orphans.

Every devkit service, test worker and local-mode pod starts through ``start_bound``. Each test runs
a small parent program in its own interpreter, so that the at-fork hook one of them registers
cannot reach the test process.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from polling import wait_for

from cdcoperator.local.children import bound_command

DEVKIT = str(Path(__file__).resolve().parents[3] / "devkit")


def _parent(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([DEVKIT, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, text=True, env=env)


# A fork hook that never returns stands for a lock another thread held when the process forked
# (how a test worker once hung before exec in CI, started with a preexec_fn from a threaded pytest).
HANGING_FORK_HOOK = """
import os, sys, threading
from cdcoperator.local.children import start_bound
os.register_at_fork(after_in_child=threading.Event().wait)
proc = start_bound([sys.executable, "-c", "print('child ran')"], stdout=sys.stdout)
print(proc.wait(60), flush=True)
"""


def test_the_child_runs_no_python_between_fork_and_exec() -> None:
    parent = _parent(HANGING_FORK_HOOK)
    out, _ = parent.communicate(timeout=90)
    assert parent.returncode == 0, out
    assert out.split() == ["child", "ran", "0"]


# A C-level at-fork handler that never returns (libc's pause) stands for gRPC's: with Popen's
# user/group CPython forks instead of vforking, gRPC's handlers ran in the child, and it segfaulted
# before exec (CI: `vtctldclient` "failed (-11)" with no output). ``as_ids`` must not fork.
HANGING_C_FORK_HOOK = """
import ctypes, sys
from cdcoperator.local.children import start_bound
libc = ctypes.CDLL(None)
pause = ctypes.cast(libc.pause, ctypes.c_void_p)
assert libc.__register_atfork(None, None, pause, None) == 0
proc = start_bound(["id", "-u"], as_ids=(int(sys.argv[1]), int(sys.argv[2])), stdout=sys.stdout)
print(proc.wait(60), flush=True)
"""


def _nobody() -> tuple[int, int]:
    pw = pwd.getpwnam("nobody")
    return pw.pw_uid, pw.pw_gid


def _as_root() -> None:
    # Not a skip: the suite runs as root (CI and the dev machines), and the real-Vitess fixtures
    # depend on switching users, so a run that cannot is a failure to see, not to hide.
    assert os.geteuid() == 0, "switching to another user needs root: run the suite as root (as CI does)"


def test_a_child_run_as_another_user_is_not_forked_and_runs_as_that_user() -> None:
    _as_root()
    uid, gid = _nobody()
    parent = _parent(HANGING_C_FORK_HOOK, str(uid), str(gid))
    out, _ = parent.communicate(timeout=90)
    assert parent.returncode == 0, out
    assert out.split() == [str(uid), "0"]


SLEEPING_CHILD = """
import sys, threading
from cdcoperator.local.children import start_bound
ids = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) > 2 else None
proc = start_bound(["sleep", "600"], as_ids=ids)
print(proc.pid, flush=True)
threading.Event().wait()
"""


def _gone(pid: int) -> bool:
    """The process is gone or a zombie (reparented children are reaped by whoever PID 1 is)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


@pytest.mark.parametrize("as_other_user", [False, True], ids=["same-user", "other-user"])
def test_the_child_dies_with_its_parent(as_other_user: bool) -> None:
    # A credential change clears the parent-death signal: as another user it must be set after.
    if as_other_user:
        _as_root()
    parent = _parent(SLEEPING_CHILD, *(map(str, _nobody()) if as_other_user else ()))
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert not _gone(child)
        assert os.getpgid(child) == child  # a session, so stop_group's killpg reaches all it starts
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        wait_for(lambda: _gone(child), timeout=30, what="the child of a killed parent to die")
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_whose_parent_died_before_binding_never_runs(tmp_path: Path) -> None:
    # parent_pid names a process that is not the child's parent: what the child sees if its real
    # parent died between fork and prctl (it was re-parented), so no death signal would ever come.
    marker = tmp_path / "ran"
    proc = subprocess.run(bound_command(["touch", str(marker)], parent_pid=os.getpid() + 1_000_000), timeout=30)
    assert proc.returncode == 1
    assert not marker.exists()
    proc = subprocess.run(bound_command(["touch", str(marker)]), timeout=30)
    assert proc.returncode == 0 and marker.exists()
