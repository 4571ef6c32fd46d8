"""Run an Apache Kafka broker (combined KRaft broker+controller) as a child JVM.

The jars come from Maven Central (``make kafka`` puts them in ``~/.cache/shardcdc/kafka-<v>/libs``).
The JVM is bound to this process: it is killed if we die (``PR_SET_PDEATHSIG``), so a crashed test
run never leaves an orphaned broker behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

from cdcoperator.local.children import start_bound, stop_group
from cdcoperator.local.ports import free_port as free_port  # re-exported: tests import it from here
from localkafka.security import BrokerSecurity, TlsFiles, listener_config, make_tls, scram_format_args

DEFAULT_VERSION = "3.9.1"

# The readiness probe's librdkafka log lines (debug detail, never the terminal's business).
_PROBE_LOG = logging.getLogger("localkafka.broker.probe")

# kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS: how Kafka's scripts run a broker or Connect in
# production. The test default (SerialGC, C1 only) favours start-up over steady-state speed and
# pause times, so benchmarks ask for these.
KAFKA_JVM_PERFORMANCE_OPTS = ("-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                              "-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15")
TEST_JVM_OPTS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
"""


def kafka_home() -> Path:
    """Where the broker jars are: ``$SHARDCDC_KAFKA_HOME`` or the default cache location."""
    env = os.environ.get("SHARDCDC_KAFKA_HOME")
    if env:
        return Path(env)
    cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc"))
    return cache / f"kafka-{DEFAULT_VERSION}"



WORKDIR_PREFIX = "shardcdc-kafka-"
OWNER_FILE = "owner.pid"
UNOWNED_STALE_AFTER_S = 12 * 3600


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_workdirs(root: Path, now: float | None = None) -> list[Path]:
    """Remove the temporary work directories of brokers whose owning process is gone.

    A killed test run or benchmark never reaches ``close()``, and its broker's data stays behind
    (tens of GB after a 2,000,000-row benchmark): such leftovers once filled this machine's disk
    and failed the next broker with "No space left on device". A directory names its owner's pid
    (``owner.pid``); one without it (older runs) is removed once untouched for 12 hours.
    """
    import shutil

    now = time.time() if now is None else now
    removed = []
    for d in root.glob(WORKDIR_PREFIX + "*"):
        try:
            owner = d / OWNER_FILE
            if owner.exists():
                stale = not _alive(int(owner.read_text().strip() or "0"))
            else:
                stale = now - d.stat().st_mtime > UNOWNED_STALE_AFTER_S
        except (OSError, ValueError):
            continue
        if stale:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


class KafkaBroker:
    """One single-node KRaft broker on 127.0.0.1 with its own log directory.

    ``stop()`` and ``start()`` may be called repeatedly: the ports, cluster id and log directory
    are kept, so data written before a restart is readable after it.
    """

    def __init__(
        self,
        home: Path | None = None,
        workdir: Path | None = None,
        heap: str = "512m",
        extra_config: dict[str, str] | None = None,
        jvm_options: tuple[str, ...] = TEST_JVM_OPTS,
        security: BrokerSecurity | None = None,
    ) -> None:
        self.home = home or kafka_home()
        libs = self.home / "libs"
        if not libs.is_dir():
            raise FileNotFoundError(f"Kafka jars not found in {libs}: run `make kafka` (or `make test`) first")
        self._own_workdir = workdir is None
        if workdir is None:
            remove_stale_workdirs(Path(tempfile.gettempdir()))
            workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
            (workdir / OWNER_FILE).write_text(str(os.getpid()))
        self.workdir = workdir
        self.heap = heap
        self.jvm_options = jvm_options
        self.port = free_port()
        self.controller_port = free_port()
        self.cluster_id = _kraft_cluster_id()
        self.extra_config = extra_config or {}
        # Secured listeners (SASL_PLAINTEXT, SASL_SSL, SSL) beside the open one, when asked for.
        self.security = security
        self.sasl_port = free_port() if security else 0
        self.sasl_ssl_port = free_port() if security else 0
        self.ssl_port = free_port() if security else 0
        self.tls: TlsFiles | None = make_tls(self.workdir / "tls") if security else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._formatted = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        """The SASL_PLAINTEXT listener (``security`` brokers only)."""
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        """The SASL_SSL listener (``security`` brokers only); its certificate is signed by ``tls.ca``."""
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        """The SSL listener (TLS without SASL; ``security`` brokers only), certificate as ``sasl_ssl_bootstrap``."""
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        return self.workdir / "broker.log"

    def _java(self, main: str, *args: str, heap: str | None = None) -> list[str]:
        cmd = ["java"]
        if heap:
            cmd += [f"-Xms{heap}", f"-Xmx{heap}"]
        cmd += [
            *self.jvm_options,
            # Extra options from the environment, for profiling a run (e.g. a JFR recording).
            *os.environ.get("LOCALKAFKA_JVM_EXTRA", "").split(),
            "-Djava.awt.headless=true",
            f"-Dlog4j.configuration=file:{self.workdir / 'log4j.properties'}",
            "-cp",
            str(self.home / "libs" / "*"),
            main,
            *args,
        ]
        return cmd

    def _write_config(self) -> Path:
        data = self.workdir / "data"
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "log.flush.interval.messages": "9223372036854775807",
            "controlled.shutdown.enable": "true",
            "shutdown.delay.ms": "0",
        }
        if self.security is not None and self.tls is not None:
            secured = (f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},SASL_SSL://127.0.0.1:{self.sasl_ssl_port},"
                       f"SSL://127.0.0.1:{self.ssl_port}")
            props["listeners"] += f",{secured}"
            props["advertised.listeners"] += f",{secured}"
            props["listener.security.protocol.map"] += ",SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL"
            props.update(listener_config(self.security, self.tls))
        props.update(self.extra_config)
        path = self.workdir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (self.workdir / "log4j.properties").write_text(_LOG4J)
        return path

    def start(self, timeout: float = 60.0) -> None:
        """Start the broker and return once it accepts connections and serves metadata."""
        if self.running:
            return
        config = self._write_config()
        if not self._formatted:
            subprocess.run(
                self._java("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config), "--ignore-formatted",
                           *(scram_format_args(self.security) if self.security else [])),
                check=True,
                capture_output=True,
            )
            self._formatted = True
        log = self.log_path.open("ab")
        self._proc = start_bound(
            self._java("kafka.Kafka", str(config), heap=self.heap),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        # A client made before the listener is up logs a librdkafka "Connect to ... failed:
        # Connection refused" line to stderr on every retry (~40 per start). So wait for the
        # port first, and route whatever the probe still logs to a Python logger, not stderr.
        self._wait_listening(deadline, timeout)
        # confluent-kafka takes a logging.Logger as the "logger" setting; its stubs type values as scalars.
        probe_config: dict[str, Any] = {"bootstrap.servers": self.bootstrap, "logger": _PROBE_LOG}
        admin = AdminClient(probe_config)
        while True:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"Kafka broker exited with {self._proc.returncode}; see {self.log_path}:\n{self._tail()}")
            try:
                meta = admin.list_topics(timeout=2)
                if meta.brokers:
                    return
            except Exception as exc:  # KafkaException while the broker is still coming up
                if time.monotonic() > deadline:
                    self.stop()
                    raise TimeoutError(f"Kafka broker not ready after {timeout}s: {exc}\n{self._tail()}") from exc
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"Kafka broker not ready after {timeout}s\n{self._tail()}")

    def _wait_listening(self, deadline: float, timeout: float) -> None:
        """Return once the broker's listener accepts TCP connections; raise if it exits or times out."""
        while not _accepts(self.port):
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"Kafka broker exited with {self._proc.returncode}; see {self.log_path}:\n{self._tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"Kafka broker not listening on {self.bootstrap} after {timeout}s\n{self._tail()}")
            time.sleep(0.05)  # polling a condition (the port) with a deadline, not waiting blind

    def _tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout: float = 30.0, kill: bool = False) -> None:
        """Stop the broker: SIGTERM (clean shutdown) or SIGKILL (crash); idempotent."""
        proc = self._proc
        if proc is None:
            return
        stop_group(proc, timeout, kill)
        self._proc = None

    def restart(self, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def close(self) -> None:
        """Stop the broker and remove a temporary work directory we created."""
        self.stop()
        if self._own_workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _kraft_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as StorageTool random-uuid).

    Like Kafka's ``Uuid.randomUuid`` it never starts with '-', which command lines would read as a flag.
    """
    import base64

    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text
