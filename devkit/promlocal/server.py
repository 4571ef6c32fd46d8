"""A Prometheus process on 127.0.0.1: configuration in, HTTP API out, nothing left behind."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from cdcoperator.local.children import start_bound, stop_group
from cdcoperator.local.ports import free_port
from promlocal.files import (
    RULES_FILE,
    SCRAPE_FILE,
    binary,
    load,
    local_scrape_config,
    plain_rules,
    shorten_for,
)


class PrometheusError(RuntimeError):
    """Prometheus did not start, or its API answered with an error."""



class Prometheus:
    """``prometheus`` with ``scrape_configs`` and ``rules`` (rule-file format) in ``workdir``.

    ``interval`` is both the scrape and the rule evaluation interval. Use as a context manager or
    call ``start()``/``stop()``; ``stop()`` is safe to call twice.
    """

    def __init__(self, workdir: Path, scrape_configs: Sequence[Mapping[str, Any]],
                 rules: Mapping[str, Any] | None = None, *, interval: str = "15s", port: int = 0,
                 retention: str = "1d") -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.scrape_configs = [dict(job) for job in scrape_configs]
        self.rules = rules
        self.interval = interval
        self.retention = retention
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.workdir / "prometheus.log"

    def _write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config: dict[str, Any] = {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval,
                       "scrape_timeout": self.interval if self._seconds(self.interval) < 10 else "10s"},
            "scrape_configs": self.scrape_configs,
        }
        if self.rules is not None:
            (self.workdir / "rules.yaml").write_text(yaml.safe_dump(dict(self.rules), sort_keys=False))
            config["rule_files"] = [str(self.workdir / "rules.yaml")]
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    @staticmethod
    def _seconds(duration: str) -> float:
        units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        for suffix in ("ms", "s", "m", "h"):
            if duration.endswith(suffix) and duration[: -len(suffix)].isdigit():
                return int(duration[: -len(suffix)]) * units[suffix]
        raise ValueError(f"unsupported duration {duration!r}")

    def start(self, timeout: float = 60.0) -> Prometheus:
        config = self._write_config()
        args = [str(binary("prometheus")), f"--config.file={config}", f"--web.listen-address=127.0.0.1:{self.port}",
                f"--storage.tsdb.path={self.workdir / 'data'}", f"--storage.tsdb.retention.time={self.retention}",
                "--web.enable-lifecycle", "--log.level=warn"]
        with self.log.open("ab") as out:
            self.proc = start_bound(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise PrometheusError(f"prometheus not ready at {self.url} after {timeout}s: {self.tail()}")
            time.sleep(0.1)  # polling readiness with a deadline
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, timeout=30)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP API --------------------------------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a ``/api/v1/...`` answer; PrometheusError with Prometheus's message otherwise."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant vector query: ``[{"metric": {...}, "value": [ts, "v"]}, ...]``."""
        data = self.api("query", query=expr)
        if data["resultType"] != "vector":
            raise PrometheusError(f"{expr}: expected a vector, got {data['resultType']}")
        return list(data["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing) as Prometheus's rule evaluation sees them."""
        return list(self.api("alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets")["activeTargets"])


def for_local_mode(targets_dir: Path, workdir: Path, *, interval: str = "5s", for_seconds: int | None = None,
                   port: int = 0) -> Prometheus:
    """A Prometheus (not started) over the target files of ``shardcdc run --metrics-port`` in
    ``targets_dir``, with the copyable scrape jobs and the shipped rules (``for:`` shortened to
    ``for_seconds`` when given)."""
    jobs = local_scrape_config(load(SCRAPE_FILE), {"shardcdc-workers": targets_dir / "workers.json",
                                                   "shardcdc-operator": targets_dir / "operator.json"}, interval)
    rules = plain_rules(load(RULES_FILE))
    if for_seconds is not None:
        rules = shorten_for(rules, for_seconds)
    return Prometheus(workdir, jobs, rules, interval=interval, port=port)
