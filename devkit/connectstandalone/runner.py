"""Run Kafka Connect standalone (``ConnectStandalone``) as a child JVM with Debezium connectors.

The jars come from Maven Central (``make debezium`` puts Kafka Connect and the Debezium Vitess
connector on one flat classpath in ``~/.cache/shardcdc/debezium-<v>/libs``). Like
``localkafka.KafkaBroker`` the JVM is bound to this process (``PR_SET_PDEATHSIG``, own process
group), so a crashed test run never leaves an orphaned Connect worker behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from cdcoperator.local.children import start_bound, stop_group
from localkafka.broker import TEST_JVM_OPTS, free_port

DEBEZIUM_VERSION = "3.5.0.Final"
VITESS_CONNECTOR_CLASS = "io.debezium.connector.vitess.VitessConnector"

_LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.debezium.name = io.debezium
logger.debezium.level = INFO
logger.worker.name = org.apache.kafka.connect.runtime.WorkerSourceTask
logger.worker.level = INFO
"""


class ConnectorFailed(RuntimeError):
    """A connector or one of its tasks reached state FAILED (the message holds Connect's trace)."""


def debezium_home() -> Path:
    """Where the jars are: ``$SHARDCDC_DEBEZIUM_HOME`` or the default cache location."""
    env = os.environ.get("SHARDCDC_DEBEZIUM_HOME")
    if env:
        return Path(env)
    cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc"))
    return cache / f"debezium-{DEBEZIUM_VERSION}"


def vitess_connector_config(
    name: str,
    topic_prefix: str,
    vtgate: str,
    keyspace: str,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """A Debezium Vitess connector config for a VTGate at ``host:port`` (one task, all shards)."""
    host, port = vtgate.rsplit(":", 1)
    return {
        "name": name,
        "connector.class": VITESS_CONNECTOR_CLASS,
        "tasks.max": "1",
        "topic.prefix": topic_prefix,
        "database.hostname": host,
        "database.port": port,
        "vitess.keyspace": keyspace,
        # Debezium's VitessTabletType enum is MASTER/REPLICA/RDONLY (no PRIMARY); MASTER is its default.
        "vitess.tablet.type": "MASTER",
        **(extra or {}),
    }


class ConnectStandalone:
    """One standalone Connect worker with JsonConverter (schemas on) and file-backed offsets.

    ``start()`` returns once every connector and all its tasks are RUNNING (a FAILED one raises
    ``ConnectorFailed`` with Connect's stack trace). Offsets live in the work directory, so a
    stop/start pair resumes from the committed positions.
    """

    def __init__(
        self,
        bootstrap: str,
        connectors: Sequence[Mapping[str, str]],
        home: Path | None = None,
        workdir: Path | None = None,
        heap: str = "512m",
        worker_config: Mapping[str, str] | None = None,
    ) -> None:
        self.home = home or debezium_home()
        libs = self.home / "libs"
        if not (self.home / ".complete").is_file():
            raise FileNotFoundError(f"Kafka Connect/Debezium jars not found in {libs}: run `make debezium` first")
        self.bootstrap = bootstrap
        self.connectors = [dict(c) for c in connectors]
        for c in self.connectors:
            if "name" not in c:
                raise ValueError(f"connector config without a name: {c}")
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="shardcdc-connect-"))
        self.heap = heap
        self.worker_config = dict(worker_config or {})
        self.rest_port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    # -- state
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.workdir / "connect.log"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    # -- configuration files
    def _write_config(self) -> list[Path]:
        props = {
            "bootstrap.servers": self.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(self.workdir / "offsets.dat"),
            "offset.flush.interval.ms": "1000",
            "listeners": self.rest_url,
            # Everything is on the classpath: no plugin.path to scan.
            "plugin.discovery": "only_scan",
            **self.worker_config,
        }
        worker = self.workdir / "worker.properties"
        worker.write_text(_properties(props))
        self._write_log_config()
        paths = [worker]
        for i, conn in enumerate(self.connectors):
            path = self.workdir / f"connector-{i}.properties"
            path.write_text(_properties(conn))
            paths.append(path)
        return paths

    def _write_log_config(self) -> None:
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)

    def _main_class(self) -> str:
        return "org.apache.kafka.connect.cli.ConnectStandalone"

    def _command(self, files: Sequence[Path]) -> list[str]:
        return [
            "java",
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            *TEST_JVM_OPTS,
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp",
            str(self.home / "libs" / "*"),
            self._main_class(),
            *(str(f) for f in files),
        ]

    # -- lifecycle
    def start(self, timeout: float = 90.0) -> None:
        """Start the worker and return once all connectors and tasks are RUNNING."""
        if self.running:
            return
        files = self._write_config()
        log = self.log_path.open("ab")
        self._proc = start_bound(
            self._command(files),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        try:
            self._wait_running(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_running(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = [c["name"] for c in self.connectors]
        while pending:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"Kafka Connect exited with {self._proc.returncode}; see {self.log_path}:\n{self.tail()}")
            name = pending[0]
            status = self.status(name)
            if status is not None:
                _raise_if_failed(name, status)
                tasks = status.get("tasks", [])
                if status["connector"]["state"] == "RUNNING" and tasks and all(t["state"] == "RUNNING" for t in tasks):
                    pending.pop(0)
                    continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"connector {name} not RUNNING after {timeout}s: {status}\n{self.tail()}")
            time.sleep(0.2)  # polling the REST API: Connect offers no push notification

    def status(self, name: str) -> dict[str, Any] | None:
        """``GET /connectors/<name>/status``, or None while the REST server or connector is not up."""
        try:
            with urllib.request.urlopen(f"{self.rest_url}/connectors/{name}/status", timeout=5) as resp:
                return dict(json.load(resp))
        except (urllib.error.URLError, ConnectionError, TimeoutError, json.JSONDecodeError):
            return None

    def check(self) -> None:
        """Raise ``ConnectorFailed`` if any connector or task has failed (or the JVM died)."""
        if not self.running:
            raise RuntimeError(f"Kafka Connect is not running; see {self.log_path}:\n{self.tail()}")
        for conn in self.connectors:
            status = self.status(conn["name"])
            if status is not None:
                _raise_if_failed(conn["name"], status)

    def stop(self, timeout: float = 30.0, kill: bool = False) -> None:
        """SIGTERM (Connect commits offsets and stops tasks) or SIGKILL; idempotent."""
        proc = self._proc
        if proc is None:
            return
        stop_group(proc, timeout, kill)
        self._proc = None

    def close(self) -> None:
        """Stop the worker and remove a temporary work directory we created."""
        self.stop()
        if self._own_workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ConnectStandalone:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _raise_if_failed(name: str, status: Mapping[str, Any]) -> None:
    parts = [("connector", status.get("connector", {}))] + [(f"task {t.get('id')}", t) for t in status.get("tasks", [])]
    for what, st in parts:
        if st.get("state") == "FAILED":
            raise ConnectorFailed(f"{name} {what} FAILED:\n{st.get('trace', '')}")


def _properties(props: Mapping[str, str]) -> str:
    """A Java properties file; values are escaped so backslashes, ``:`` and ``=`` survive."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace("\n", "\\n").replace("=", "\\=").replace(":", "\\:")

    return "".join(f"{esc(k)}={esc(v)}\n" for k, v in props.items())
