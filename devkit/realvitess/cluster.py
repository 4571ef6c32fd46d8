"""A multi-process Vitess cluster for what vttestserver cannot do (``Reshard`` workflows): etcd (the
one ``make kube`` builds) as topology, ``vtctld``, ``vtgate``, and per shard one primary
``vttablet`` with its own ``mysqlctl``-managed ``mariadbd``.

One tablet per shard: on MariaDB, Vitess v24 cannot set up replicas (``SetReplicationSource …
invalid MySQL 5.6 SID ""``), so there are no replicas and no ``PlannedReparentShard`` to another
tablet (docs/fidelity.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc

from cdcoperator.local.ports import free_port_block

from .client import VTGateClient, VTGateError
from .env import MARIADB_ROOT, Processes, VitessEnv, kill_strays, vitess_env

CELL = "zone1"


def etcd_binary() -> Path:
    cache = Path(os.environ.get("SHARDCDC_CACHE", Path.home() / ".cache" / "shardcdc"))
    home = Path(os.environ.get("SHARDCDC_KUBE_HOME", cache / "kube-v1.33.13"))
    etcd = home / "bin" / "etcd"
    if not os.access(etcd, os.X_OK):
        raise RuntimeError(f"etcd is not built in {home}: run `make kube` (or `make setup`) first")
    return etcd


class VitessCluster:
    """``with VitessCluster("customer", ["0"], ddl, vschema) as c:`` -> ``c.vtgate``, ``c.vtctld``;
    ``c.add_shards([...])`` brings up target tablets, ``c.vtctldclient(...)`` runs workflow
    commands. Everything is stopped on exit, also when the start fails."""

    def __init__(self, keyspace: str, shards: Sequence[str], ddl: Sequence[str], vschema: Mapping[str, object],
                 env: VitessEnv | None = None, start_timeout: float = 240.0) -> None:
        self.keyspace, self.ddl, self.vschema = keyspace, list(ddl), dict(vschema)
        self.env = env or vitess_env()
        self.start_timeout = start_timeout
        self.root = Path(tempfile.mkdtemp(prefix="shardcdc-vitess-cluster-"))
        self.procs = Processes(self.env, self.root)
        self.initial = list(shards)
        self.tablets: dict[str, int] = {}  # shard -> tablet uid
        self._ports: dict[int, int] = {}  # tablet uid -> its base port (http, +1 grpc, +2 mariadbd)
        self._uids = 0
        self.base = 0

    # ports: base etcd client, +1 etcd peer, +2/+3 vtctld http/grpc, +4/+5/+6 vtgate http/grpc/mysql
    @property
    def vtctld(self) -> str:
        return f"127.0.0.1:{self.base + 3}"

    @property
    def vtgate(self) -> str:
        return f"127.0.0.1:{self.base + 5}"

    def _topo(self) -> list[str]:
        return ["--topo-implementation", "etcd2", "--topo-global-server-address", f"127.0.0.1:{self.base}",
                "--topo-global-root", "/vitess/global"]

    def client(self) -> VTGateClient:
        return VTGateClient(self.vtgate)

    def vtctldclient(self, *args: str, timeout: float = 180.0) -> str:
        return self.procs.run(["vtctldclient", "--server", self.vtctld, *args], timeout=timeout)

    def start(self) -> VitessCluster:
        try:
            self.procs.prepare(extra=[etcd_binary()])
            self.base = free_port_block(7)
            etcd_dir = self.root / "etcd"
            etcd_dir.mkdir(mode=0o700)
            self.procs.give(etcd_dir)
            self.procs.start("etcd", ["etcd", "--data-dir", str(etcd_dir),
                                      "--listen-client-urls", f"http://127.0.0.1:{self.base}",
                                      "--advertise-client-urls", f"http://127.0.0.1:{self.base}",
                                      "--listen-peer-urls", f"http://127.0.0.1:{self.base + 1}",
                                      "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.base + 1}",
                                      "--initial-cluster", f"default=http://127.0.0.1:{self.base + 1}"])
            self._until(lambda: self._http(f"http://127.0.0.1:{self.base}/health"), "etcd")
            self.procs.run(["vtctldclient", "--server", "internal", *self._topo(), "AddCellInfo", "--root",
                            f"/vitess/{CELL}", "--server-address", f"127.0.0.1:{self.base}", CELL])
            backups = self.root / "backups"
            backups.mkdir()
            self.procs.give(backups)
            self.procs.start("vtctld", ["vtctld", *self._topo(), "--cell", CELL, "--service-map", "grpc-vtctl,grpc-vtctld",
                                        "--port", str(self.base + 2), "--grpc-port", str(self.base + 3),
                                        "--backup-storage-implementation", "file", "--file-backup-storage-root",
                                        str(backups)])
            self._until(lambda: self._http(f"http://127.0.0.1:{self.base + 2}/debug/status"), "vtctld")
            self.vtctldclient("CreateKeyspace", "--durability-policy=none", self.keyspace)
            self.add_shards(self.initial)
            self.vtctldclient("ApplySchema", *[a for s in self.ddl for a in ("--sql", s)], self.keyspace)
            self.vtctldclient("ApplyVSchema", "--vschema", json.dumps(self.vschema), self.keyspace)
            self._start_vtgate()
            self.wait_serving(self.initial)
        except BaseException:
            self.stop()
            raise
        return self

    def add_shards(self, shards: Sequence[str]) -> None:
        """A primary tablet (and its mariadbd) per shard, made primary with PlannedReparentShard."""
        for shard in shards:
            self._uids += 1
            uid = 100 * self._uids  # never reused: a stopped tablet's data stays until the end
            self.tablets[shard] = uid
            self._ports[uid] = port = free_port_block(3)
            self.procs.run(["mysqlctl", "--tablet-uid", str(uid), "--mysql-port", str(port + 2), "init"], timeout=180)
            self._start_tablet(shard)
        for shard in shards:
            self.vtctldclient("PlannedReparentShard", f"{self.keyspace}/{shard}", "--new-primary",
                              f"{CELL}-{self.tablets[shard]:010d}")

    def _start_tablet(self, shard: str) -> None:
        uid = self.tablets[shard]
        port, alias = self._ports[uid], f"{CELL}-{uid:010d}"
        self.procs.start(f"vttablet-{uid}", [
            "vttablet", *self._topo(), "--tablet-path", alias, "--tablet-hostname", "127.0.0.1",
            "--init-keyspace", self.keyspace, "--init-shard", shard, "--init-tablet-type", "replica",
            "--port", str(port), "--grpc-port", str(port + 1), "--service-map",
            "grpc-queryservice,grpc-tabletmanager,grpc-updatestream", "--db-charset", "utf8mb4",
            "--mycnf-file", str(self.procs.data / f"vt_{uid:010d}" / "my.cnf"),
            "--backup-storage-implementation", "file", "--file-backup-storage-root", str(self.root / "backups"),
            "--enable-replication-reporter=false", "--health-check-interval", "1s",
        ])
        self._until(lambda p=port: self._http(f"http://127.0.0.1:{p}/debug/status"), f"vttablet {alias}")

    def _start_vtgate(self) -> None:
        self.procs.start("vtgate", ["vtgate", *self._topo(), "--cell", CELL, "--cells-to-watch", CELL,
                                    "--port", str(self.base + 4), "--grpc-port", str(self.base + 5),
                                    "--mysql-server-port", str(self.base + 6), "--mysql-server-bind-address",
                                    "127.0.0.1", "--tablet-types-to-wait", "PRIMARY",
                                    "--service-map", "grpc-vtgateservice", "--mysql-auth-server-impl", "none"])

    def kill_tablet(self, shard: str) -> None:
        """SIGKILL a shard's vttablet and its mariadbd (a crash: InnoDB recovers on the next start)."""
        uid = self.tablets[shard]
        self.procs.stop(f"vttablet-{uid}", kill=True)
        kill_strays(self.procs.data / f"vt_{uid:010d}")
        # A stale pid file makes mysqld_safe refuse to start ("A mysqld process already exists")
        # while the killed mariadbd lingers as a zombie of a parent that does not reap it.
        (self.procs.data / f"vt_{uid:010d}" / "mysql.pid").unlink(missing_ok=True)

    def start_tablet(self, shard: str) -> None:
        """Start a killed tablet again: ``mysqlctl start`` (same data, same port), then its vttablet,
        which finds itself the shard's primary in the topology and serves as one."""
        uid = self.tablets[shard]
        self.procs.run(["mysqlctl", "--tablet-uid", str(uid), "--mysql-port", str(self._ports[uid] + 2), "start"],
                       timeout=180)
        # Vitess's mariadb10.cnf starts every server read-only, and on MariaDB 10.11 the tablet's
        # users may not write then (READ_ONLY ADMIN left SUPER in 10.11): a restarted primary's
        # vttablet retries `create database if not exists _vt` forever ("running with the
        # --read-only option", docs/fidelity.md). Its primary role is in the topology: clear it.
        sock = self.procs.data / f"vt_{uid:010d}" / "mysql.sock"
        subprocess.run([str(MARIADB_ROOT / "bin" / "mariadb"), "--no-defaults", "-S", str(sock), "-u", "root",
                        "-e", "SET GLOBAL read_only = 0"], check=True, capture_output=True, timeout=60)
        self._start_tablet(shard)
        self.wait_serving([shard])

    def restart_vtgate(self, kill: bool = True) -> None:
        """Stop VTGate (SIGKILL by default) and start it again on the same ports."""
        self.procs.stop("vtgate", kill=kill)
        self._start_vtgate()
        self.wait_serving(list(self.tablets))

    def wait_serving(self, shards: Sequence[str]) -> None:
        """Until VTGate answers a query on each shard's primary."""
        def ready() -> bool:
            with self.client() as c:
                try:
                    for s in shards:
                        c.execute("select 1 from dual", f"{self.keyspace}:{s}@primary")
                except (grpc.RpcError, VTGateError):
                    return False
            return True
        self._until(ready, f"VTGate serving {self.keyspace}/{','.join(shards)}")

    def _until(self, ready: object, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}: {self.procs.log_tail(name)}")
            if ready():  # type: ignore[operator]
                return
            time.sleep(0.3)  # polling the cluster's start with a deadline
        raise TimeoutError(f"{what} not ready within {self.start_timeout:.0f}s")

    @staticmethod
    def _http(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def stop_tablet(self, shard: str) -> None:
        """Remove a shard's vttablet and its mariadbd (by pid: mysqlctl started it outside our groups),
        SIGKILLed: after SIGTERM a vttablet that VTGate still health-checks waits its whole
        --onterm-timeout (10 s, measured) for its OnTermSync hooks, and nothing of it is used again."""
        uid = self.tablets.pop(shard)
        self.procs.stop(f"vttablet-{uid}", kill=True)
        kill_strays(self.procs.data / f"vt_{uid:010d}")

    def stop(self) -> None:
        # Everything SIGKILLed: the cluster's files are deleted next, so a graceful stop saves nothing,
        # and after SIGTERM each vttablet waits --onterm-timeout (10 s) while VTGate health-checks it.
        self.procs.stop_all(kill=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> VitessCluster:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
