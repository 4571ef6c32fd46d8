"""Kafka Connect in distributed mode (``ConnectDistributed``): offsets, configs and statuses in Kafka
topics, connectors managed over the REST API, as users run Debezium in production.

One worker joins its own group; the offsets topic is the one shardcdc shares with Debezium when
moving a connector either way. ``stop_connector`` is Connect 3.5's ``PUT /connectors/<n>/stop``
(tasks stop and flush their offsets; the configuration stays), ``reconfigure`` + ``resume`` start it
again with other settings.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from connectstandalone.runner import ConnectStandalone, _properties, _raise_if_failed

__all__ = ["ConnectDistributed"]


class ConnectDistributed(ConnectStandalone):
    """One distributed Connect worker (JsonConverter with schemas, like ``ConnectStandalone``)."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        offsets_topic: str,
        home: Path | None = None,
        workdir: Path | None = None,
        heap: str = "512m",
        worker_config: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(bootstrap, [], home=home, workdir=workdir, heap=heap, worker_config=worker_config)
        self.group_id = group_id
        self.offsets_topic = offsets_topic

    def _write_config(self) -> list[Path]:
        props = {
            "bootstrap.servers": self.bootstrap,
            "group.id": self.group_id,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "offset.storage.topic": self.offsets_topic,
            "config.storage.topic": f"{self.group_id}-configs",
            "status.storage.topic": f"{self.group_id}-status",
            "offset.storage.replication.factor": "1",
            "config.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.flush.interval.ms": "1000",
            "listeners": self.rest_url,
            "plugin.discovery": "only_scan",
            **self.worker_config,
        }
        self.workdir.mkdir(parents=True, exist_ok=True)
        worker = self.workdir / "worker.properties"
        worker.write_text(_properties(props))
        self._write_log_config()
        return [worker]

    def _main_class(self) -> str:
        return "org.apache.kafka.connect.cli.ConnectDistributed"

    def _wait_running(self, timeout: float) -> None:
        """The REST API answers once the worker has joined its group and read its config topic."""
        deadline = time.monotonic() + timeout
        # Jetty answers 404 until Connect's resources are registered.
        while self._request("GET", "/connectors", retry=(404, 409, 503)) is None:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"Kafka Connect exited with {self._proc.returncode}; see {self.log_path}:\n"
                                   f"{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka Connect REST API not up after {timeout}s\n{self.tail()}")
            time.sleep(0.2)  # polling the REST API: Connect offers no push notification

    # -- REST
    def _request(self, method: str, path: str, body: Any = None, retry: tuple[int, ...] = (409, 503)) -> Any:
        """The decoded answer; None while the worker does not answer (not up yet, or rebalancing:
        HTTP codes in ``retry``)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.rest_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code in retry:  # rebalance in progress / not ready: the caller polls
                return None
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
        return json.loads(text) if text else {}

    def _call(self, method: str, path: str, body: Any = None, timeout: float = 60.0) -> Any:
        deadline = time.monotonic() + timeout
        while (answer := self._request(method, path, body)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path} not answered after {timeout}s\n{self.tail()}")
            time.sleep(0.2)  # the worker is rebalancing: poll until it answers
        return answer

    def configure(self, config: Mapping[str, str], timeout: float = 60.0) -> None:
        """Create or reconfigure a connector (``PUT /connectors/<name>/config``); ``timeout`` bounds
        the wait while the worker is still joining its group or rebalancing."""
        settings = {k: v for k, v in config.items() if k != "name"}
        self._call("PUT", f"/connectors/{config['name']}/config", settings, timeout=timeout)

    def wait_state(self, name: str, state: str, tasks: int | None = None, timeout: float = 90.0) -> dict[str, Any]:
        """Poll until the connector is ``state`` (RUNNING: with ``tasks`` tasks, all RUNNING;
        STOPPED: no tasks left). A FAILED connector or task raises ``ConnectorFailed``."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.status(name)
            if status is not None:
                _raise_if_failed(name, status)
                running = status.get("tasks", [])
                ok = status["connector"]["state"] == state and (
                    not running if state == "STOPPED"
                    else bool(running) and all(t["state"] == "RUNNING" for t in running)
                    and (tasks is None or len(running) == tasks))
                if ok:
                    return status
            if time.monotonic() > deadline:
                raise TimeoutError(f"connector {name} not {state} after {timeout}s: {status}\n{self.tail()}")
            time.sleep(0.2)  # polling the REST API: Connect offers no push notification

    def check(self) -> None:
        """Raise ``ConnectorFailed`` if any connector or task has failed (or the JVM died)."""
        if not self.running:
            raise RuntimeError(f"Kafka Connect is not running; see {self.log_path}:\n{self.tail()}")
        for name in self._request("GET", "/connectors") or ():
            status = self.status(name)
            if status is not None:
                _raise_if_failed(name, status)

    def stop_connector(self, name: str, timeout: float = 90.0) -> None:
        """``PUT /connectors/<name>/stop``; returns once its tasks are gone (their offsets flushed)."""
        self._call("PUT", f"/connectors/{name}/stop")
        self.wait_state(name, "STOPPED", timeout=timeout)

    def resume(self, name: str) -> None:
        self._call("PUT", f"/connectors/{name}/resume")

    def task_configs(self, name: str) -> list[dict[str, str]]:
        """The task configurations the connector produced (``GET /connectors/<name>/tasks``)."""
        return [t["config"] for t in self._call("GET", f"/connectors/{name}/tasks")]
