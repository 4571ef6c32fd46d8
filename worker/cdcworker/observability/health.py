"""Liveness and readiness verdicts for the pod's probes (pure: a TaskMetrics snapshot → verdict).

Liveness asks "is the streaming loop still turning?": the loop refreshes a heartbeat
(``TaskMetrics.beat`` / ``on_response``), and a heartbeat older than ``liveness_timeout_s`` means
a stuck process that Kubernetes should restart. The loop must therefore wake at least that often;
requesting VTGate heartbeats (``heartbeat_interval``) well below the timeout guarantees it.

Readiness asks "is this task delivering changes?": false while starting, reconnecting, after a
reshard stop, failed, stopped, or whenever the VStream is not connected. A supervised task whose
work is done (``completed``: snapshot.mode=initial_only) is live and ready without a loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdcworker.observability.metrics import TaskMetrics

__all__ = ["Verdict", "liveness", "readiness"]


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    detail: str

    def body(self) -> bytes:
        return f"{'ok' if self.ok else 'fail'}: {self.detail}\n".encode()


def liveness(tm: TaskMetrics, now: float | None = None) -> Verdict:
    if tm.state == "completed":  # no loop any more: the work is done and the process waits to be stopped
        return Verdict(True, f"completed ({tm.reason})" if tm.reason else "completed")
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
