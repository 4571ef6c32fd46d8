"""Helpers for tests that run local mode as users do: a ``shardcdc run`` process and its control endpoint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cdcoperator.local.children import start_bound, stop_group
from cdcoperator.local.control import ControlClient, ControlError


class Run:
    """A ``shardcdc run -f MANIFEST --state-dir STATE`` process and its output."""

    def __init__(self, manifest: Path, state: Path, log: Path, extra: tuple[str, ...] = ()) -> None:
        self.log = log
        self.state = state
        with log.open("ab") as out:
            self.proc = start_bound(
                [sys.executable, "-m", "shardcdc_cli.cli", "run", "-f", str(manifest), "--state-dir", str(state),
                 "--resync-seconds", "1", "--restart-backoff", "2", *extra],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "GRPC_VERBOSITY": "ERROR"})

    def stop(self) -> int:
        stop_group(self.proc, timeout=90)
        return int(self.proc.returncode)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def pod_logs(self, chars: int = 1200) -> str:
        """The end of every pod's and Job's container log under the state directory (for a failure's
        message: a worker that crashed or hung says why only there)."""
        parts = []
        for path in sorted(self.state.glob("*/*/*/*/*/container.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.relative_to(self.state)} (last {chars} chars)\n{text[-chars:]}")
        return "\n".join(parts)

    def alive(self) -> None:
        if self.proc.poll() is not None:  # not an AssertionError: wait_for must not keep polling
            raise RuntimeError(f"shardcdc run exited with {self.proc.returncode}:\n{self.output()[-3000:]}")


def shardcdc(*args: str) -> subprocess.CompletedProcess[str]:
    """The ``shardcdc`` command as a separate process."""
    return subprocess.run([sys.executable, "-m", "shardcdc_cli.cli", *args], capture_output=True, text=True, timeout=60)


def control(state: Path, name: str) -> ControlClient | None:
    """The running instance's control client once its endpoint answers (None before)."""
    try:
        client = ControlClient.find(name, state_dir=state)
        client.get()
        return client
    except ControlError:
        return None


def ready(client: ControlClient, generation: int, tasks: int, shards: int) -> dict[str, Any] | None:
    """The assignment once the connector is Ready in ``generation`` with ``tasks`` tasks over ``shards`` shards."""
    status = client.get().get("status") or {}
    a = status.get("assignment") or {}
    cond = next((c for c in status.get("conditions") or () if c["type"] == "Ready"), {})
    ok = (cond.get("status") == "True" and a.get("generation") == generation and a.get("tasks") == tasks
          and len(a.get("shards") or ()) == shards)
    return a if ok else None


def positions(client: ControlClient) -> dict[str, str]:
    """Shard -> GTID position of every task, as the connector's status reports them."""
    out = {}
    for task in ((client.get().get("status") or {}).get("assignment") or {}).get("taskStates") or ():
        for part in (task.get("position") or "").split(";"):
            if "@" in part:
                shard, gtid = part.split("@", 1)
                out[shard] = gtid
    return out
