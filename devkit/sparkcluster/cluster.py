"""A Spark standalone cluster on loopback: one master, N workers, each a JVM of its own, started
from the PySpark distribution installed in the venv (``bin/spark-class``), and ``spark-submit``
against it.

Each worker launches one executor JVM per application in ``<worker dir>/<app id>/<executor id>``
(Spark's ``ExecutorRunner`` makes that its working directory), and the executor's PySpark daemon
and Python workers inherit it: that is how ``executors`` finds an executor's pid without Spark's
UI. Master and workers start bound to this process (``cdcoperator.local.children.start_bound``) in
sessions of their own; ``stop`` ends their groups and then every process still working in the
cluster's directory (PySpark's daemon moves itself to a process group of its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdcoperator.local.children import start_bound, stop_group

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://[0-9.]+:\d+)")
_MASTER_UI = re.compile(r"Successfully started service 'MasterUI' on port (\d+)")

# Cluster-wide defaults (SPARK_CONF_DIR/spark-defaults.conf): no fixed ports (the standalone REST
# server listens on 6066 by default, which two clusters on one machine would fight over), small
# daemons, and workers that keep finished executors' directories (the tests read them).
DEFAULTS = {
    "spark.master.rest.enabled": "false",
    "spark.ui.enabled": "false",
    "spark.worker.cleanup.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


class SparkClusterError(RuntimeError):
    """The cluster did not come up (the message carries the relevant log's tail)."""


@dataclass(frozen=True)
class Executor:
    """An executor JVM: its pid, the application and executor ids, and its working directory."""

    pid: int
    app_id: str
    executor_id: str
    workdir: Path


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _proc_cwd(pid: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None


def _proc_cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the command in parentheses


def alive(pid: int) -> bool:
    """The pid runs and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class SparkCluster:
    """``with SparkCluster(tmp_dir) as cluster: cluster.submit([...])``."""

    def __init__(self, workdir: Path, workers: int = 2, cores_per_worker: int = 1, worker_memory: str = "1g",
                 conf: Mapping[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.n_workers, self.cores, self.memory = workers, cores_per_worker, worker_memory
        self.conf = {**DEFAULTS, **(conf or {})}
        self.home = spark_home()
        self.master: subprocess.Popen[Any] | None = None
        self.workers: list[subprocess.Popen[Any]] = []
        self.master_url = ""
        self.ui_port = 0

    # --- life cycle ------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The environment of every Spark process of this cluster (daemons and spark-submit)."""
        return {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_CONF_DIR": str(self.workdir / "conf"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
            "SPARK_DAEMON_MEMORY": "256m",
            "PYSPARK_PYTHON": sys.executable,  # executors import cdcworker from this venv
        }

    def _spawn(self, name: str, args: Sequence[str]) -> subprocess.Popen[Any]:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - the child owns it
        with log:
            return start_bound([str(self.home / "bin" / "spark-class"), *args], stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=self.env(), cwd=self.workdir)

    def log(self, name: str) -> str:
        try:
            return (self.workdir / f"{name}.log").read_text(errors="replace")
        except OSError:
            return ""

    def worker_dir(self, i: int) -> Path:
        return self.workdir / f"worker-{i}"

    def start(self, timeout: float = 240.0) -> SparkCluster:
        for d in ("conf", "local", *(f"worker-{i}" for i in range(self.n_workers))):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        (self.workdir / "conf" / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in self.conf.items()))
        deadline = time.monotonic() + timeout
        try:
            self.master = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                                 "--port", "0", "--webui-port", "0"])
            self.master_url = self._await_log("master", _MASTER_URL, deadline, self.master)
            self.ui_port = int(self._await_log("master", _MASTER_UI, deadline, self.master))
            for i in range(self.n_workers):
                self.workers.append(self._spawn(f"worker-{i}", [
                    "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                    "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(self.worker_dir(i)),
                    self.master_url]))
            while self.state().get("aliveworkers", 0) < self.n_workers:
                self._check(deadline, "the workers did not register with the master", "worker-0")
                time.sleep(0.2)  # polling the master's state
        except BaseException:
            self.stop()
            raise
        return self

    def _await_log(self, name: str, pattern: re.Pattern[str], deadline: float, proc: subprocess.Popen[Any]) -> str:
        while True:
            m = pattern.search(self.log(name))
            if m:
                return m.group(1)
            if proc.poll() is not None:
                raise SparkClusterError(f"spark {name} exited with {proc.returncode}:\n{self.log(name)[-3000:]}")
            self._check(deadline, f"spark {name} did not start", name)
            time.sleep(0.2)  # polling the log

    def _check(self, deadline: float, what: str, log: str) -> None:
        if time.monotonic() > deadline:
            raise SparkClusterError(f"{what} in time; {log}.log ends:\n{self.log(log)[-3000:]}")

    def stop(self) -> None:
        """Workers, then master, then anything still running in the cluster's directory (executor
        JVMs and PySpark daemons a worker did not take down)."""
        for proc in [*self.workers, *([self.master] if self.master else [])]:
            stop_group(proc, timeout=20)
        for pid in self.pids_under(self.workdir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- state ---------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        """The master's JSON state (workers, active and completed applications)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=10) as resp:
                return dict(json.loads(resp.read()))
        except OSError:
            return {}

    @staticmethod
    def pids_under(root: Path) -> list[int]:
        """Processes (other than this one) whose working directory is ``root`` or below it."""
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            cwd = _proc_cwd(int(entry))
            if cwd is not None and (cwd == root or root in cwd.parents):
                out.append(int(entry))
        return out

    def executors(self, app_id: str | None = None) -> list[Executor]:
        """The executor JVMs running now (of ``app_id``, or of every application)."""
        out = []
        for i in range(self.n_workers):
            for pid in self.pids_under(self.worker_dir(i)):
                cmd = _proc_cmdline(pid)
                cwd = _proc_cwd(pid)
                if EXECUTOR_CLASS not in cmd or cwd is None or not alive(pid):
                    continue
                if app_id is None or cwd.parent.name == app_id:
                    out.append(Executor(pid, cwd.parent.name, cwd.name, cwd))
        return out

    def executor_of(self, pid: int) -> Executor | None:
        """The executor JVM that ``pid`` (a Python worker of a task) descends from."""
        by_pid = {e.pid: e for e in self.executors()}
        seen = 0
        current: int | None = pid
        while current and current > 1 and seen < 16:
            if current in by_pid:
                return by_pid[current]
            current, seen = parent_pid(current), seen + 1
        return None

    # --- applications --------------------------------------------------------------------------------

    def submit_command(self, app: str | Path, args: Sequence[str], conf: Mapping[str, str] | None = None) -> list[str]:
        """``spark-submit --master spark://...`` in client mode: the standalone cluster manager does not
        run Python drivers in cluster mode, so the driver is this command's own process."""
        cmd = [str(self.home / "bin" / "spark-submit"), "--master", self.master_url, "--deploy-mode", "client"]
        for k, v in {"spark.executor.memory": "512m", **(conf or {})}.items():
            cmd += ["--conf", f"{k}={v}"]
        return [*cmd, str(app), *map(str, args)]

    def submit(self, app: str | Path, args: Sequence[str], conf: Mapping[str, str] | None = None,
               log_name: str = "submit") -> subprocess.Popen[Any]:
        """Start spark-submit (bound to this process, in a session of its own: ``kill_driver`` ends it
        whole); its output goes to ``<log_name>.log`` in the cluster's directory."""
        out = open(self.workdir / f"{log_name}.log", "wb")  # noqa: SIM115 - the child owns it
        with out:
            return start_bound(self.submit_command(app, args, conf), stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, env=self.env(), cwd=self.workdir)

    @staticmethod
    def kill_driver(proc: subprocess.Popen[Any]) -> None:
        """SIGKILL the driver (spark-submit's JVM and its Python process): no clean shutdown."""
        stop_group(proc, kill=True)

    def await_no_executors(self, app_id: str, timeout: float = 120.0) -> None:
        """Wait until no executor of ``app_id`` runs (its Python workers are gone with them)."""
        deadline = time.monotonic() + timeout
        while self.executors(app_id) or any(
                app_id in str(_proc_cwd(p)) for i in range(self.n_workers) for p in self.pids_under(self.worker_dir(i))):
            if time.monotonic() > deadline:
                raise SparkClusterError(f"executors of {app_id} still run {timeout:.0f}s after its driver ended")
            time.sleep(0.2)  # polling the process table

    def app_ids(self) -> list[str]:
        """Applications that ran executors on this cluster, oldest first (from the workers' directories)."""
        return sorted({p.name for i in range(self.n_workers) for p in self.worker_dir(i).glob("app-*")})
