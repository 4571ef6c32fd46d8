"""Liveness and readiness verdicts for the pod's probes (pure: a TaskMetrics snapshot → verdict).

Liveness asks "is the streaming loop still turning?": the loop refreshes a heartbeat
(``TaskMetrics.beat`` / ``on_response``), and a heartbeat older than ``liveness_timeout_s`` means
a stuck process that Kubernetes should restart. The loop must therefore wake at least that often;
requesting VTGate heartbeats (``heartbeat_interval``) well below the timeout guarantees it.

Readiness asks "is this task delivering changes?": false while starting, reconnecting, after a
reshard stop, failed, stopped, or whenever the VStream is not connected. A supervised task whose
work is done (``completed``: snapshot.mode=initial_only) is live and ready without a loop; one
stopped at a reshard journal (``reassignment_needed``) is live, not ready, until it is stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdcworker.observability.metrics import TaskMetrics

__all__ = ["Verdict", "liveness", "readiness"]

# A supervised worker waits in these states instead of exiting: its snapshot is done
# (initial_only), or it stopped at a reshard journal the operator must read.
_WAITING = frozenset(("completed", "reassignment_needed"))


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    detail: str

    def body(self) -> bytes:
        return f"{'ok' if self.ok else 'fail'}: {self.detail}\n".encode()


def liveness(tm: TaskMetrics, now: float | None = None) -> Verdict:
    if tm.state in _WAITING:  # no loop any more: the process waits to be stopped (a restart would undo it)
        return Verdict(True, f"{tm.state} ({tm.reason})" if tm.reason else tm.state)
    t = tm.clock() if now is None else now
    age = t - tm.last_beat
    if age <= tm.liveness_timeout_s:
        return Verdict(True, f"loop heartbeat {age:.1f}s ago")
    return Verdict(False, f"loop heartbeat {age:.1f}s ago exceeds {tm.liveness_timeout_s:g}s")


def readiness(tm: TaskMetrics) -> Verdict:
    state = tm.state
    reason = f" ({tm.reason})" if tm.reason else ""
    if not tm.ready():
        if state in ("snapshotting", "streaming"):
            return Verdict(False, f"{state} but not connected to VTGate")
        return Verdict(False, f"{state}{reason}")
    return Verdict(True, state)
