"""A single-process Vitess cluster: ``vttestserver`` runs ``mysqlctl`` (one ``mariadbd``) and
``vtcombo`` (VTGate, vtctld and a tablet per shard in one process), for one sharded keyspace.

Ports (vttestserver's layout): ``base`` HTTP, ``base+1`` gRPC (VTGate's ``Vitess`` service and
vtctld), ``base+2`` mariadbd, ``base+3`` VTGate's MySQL protocol."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc

from cdcoperator.local.ports import free_port_block

from .client import VTGateClient, VTGateError
from .env import Processes, VitessEnv, vitess_env


def shard_names(count: int) -> list[str]:
    """Vitess's even split of the key space into ``count`` shards (``-80``, ``80-`` for 2)."""
    if count == 1:
        return ["0"]
    bounds = [(i * 256 // count) for i in range(1, count)]
    edges = [""] + [f"{b:02x}" for b in bounds] + [""]
    return [f"{a}-{b}" for a, b in itertools.pairwise(edges)]


def hash_vschema(tables: Sequence[str], column: str = "id") -> dict[str, object]:
    """Every table sharded by a ``hash`` vindex (named ``hash``) on ``column``."""
    return {"sharded": True, "vindexes": {"hash": {"type": "hash"}},
            "tables": {t: {"column_vindexes": [{"column": column, "name": "hash"}]} for t in tables}}


# Seconds from the schema reload until VTGate's schema tracking must know every table (a few
# seconds when it works; when it did not, it had not after 240).
TRACKING_GRACE = 60.0


class _Untracked(Exception):
    """VTGate serves every shard but its schema tracking does not know the tables."""


class VTTestServer:
    """``with VTTestServer("commerce", 2, ddl=[...], vschema=...) as vt:`` -> ``vt.vtgate`` (gRPC
    address). Everything it started is stopped on exit, also when the start fails."""

    def __init__(self, keyspace: str, shards: int, ddl: Sequence[str], vschema: Mapping[str, object],
                 env: VitessEnv | None = None, start_timeout: float = 240.0) -> None:
        self.keyspace, self.shards = keyspace, shard_names(shards)
        self.ddl, self.vschema = list(ddl), dict(vschema)
        self.env = env or vitess_env()
        self.start_timeout = start_timeout
        self.root = Path(tempfile.mkdtemp(prefix="shardcdc-vitess-"))
        self.procs = Processes(self.env, self.root)
        self.base = 0

    @property
    def vtgate(self) -> str:
        return f"127.0.0.1:{self.base + 1}"

    @property
    def vtctld(self) -> str:
        return self.vtgate  # vtcombo serves vtctld's gRPC on the same port

    def client(self) -> VTGateClient:
        return VTGateClient(self.vtgate)

    def tables(self) -> list[str]:
        return [m.group(1) for s in self.ddl if (m := re.match(r"\s*create\s+table\s+`?(\w+)", s, re.I))]

    def start(self) -> VTTestServer:
        """Start it; once more from nothing if VTGate's schema tracking never learns the tables
        (seen once in CI: 240 s of "cannot use column offsets in order clause when using `*`")."""
        for attempt in (1, 2):
            try:
                self._start_once()
                return self
            except _Untracked as exc:
                self.stop()
                if attempt == 2:
                    raise TimeoutError(f"{exc}, twice") from exc
                print(f"realvitess: {exc}; starting vttestserver again from nothing", file=sys.stderr, flush=True)
                self.root = Path(tempfile.mkdtemp(prefix="shardcdc-vitess-"))
                self.procs = Processes(self.env, self.root)
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        try:
            self.procs.prepare()
            schema = self.root / "schema" / self.keyspace
            schema.mkdir(parents=True)
            (schema / "schema.sql").write_text("".join(f"{s.rstrip(';')};\n" for s in self.ddl))
            (schema / "vschema.json").write_text(json.dumps(self.vschema))
            self.procs.give(self.root / "schema")
            self.base = free_port_block(4)
            self.procs.start("vttestserver", [
                "vttestserver", "--port", str(self.base), "--keyspaces", self.keyspace,
                "--num-shards", str(len(self.shards)), "--replica-count", "1", "--rdonly-count", "0",
                "--mysql-bind-host", "127.0.0.1", "--vtcombo-bind-host", "127.0.0.1",
                "--data-dir", str(self.procs.data), "--schema-dir", str(self.root / "schema"),
                "--vschema-ddl-authorized-users=%", "--alsologtostderr",
            ])
            self._wait_ready()
        except _Untracked:
            raise  # start() stops it and tries once more
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        """Until VTGate serves every shard's primary and the tables answer a query."""
        deadline = time.monotonic() + self.start_timeout
        last, reloaded = "", 0.0
        with self.client() as c:
            while time.monotonic() < deadline:
                proc = self.procs.procs["vttestserver"]
                if proc.poll() is not None:
                    raise RuntimeError(f"vttestserver exited with {proc.returncode}: {self.procs.log_tail('vttestserver')}")
                try:
                    shards = {bytes(r["Shards"] or b"").decode()
                              for r in c.rows(f"show vitess_shards like '{self.keyspace}/%'")}
                    if shards == {f"{self.keyspace}/{s}" for s in self.shards}:
                        for s in self.shards:
                            c.execute("select 1 from dual", f"{self.keyspace}:{s}")
                        if not reloaded:
                            # The tablets loaded their schema before vttestserver applied ours:
                            # without a reload a VStream fails at the first row ("unknown table").
                            self.reload_schema()
                            reloaded = time.monotonic()
                        for t in self.tables():  # VTGate's schema tracking knows them (VT09015 before)
                            c.execute(f"select * from {t} order by 1 limit 1", self.keyspace)
                        return
                    last = f"shards {sorted(shards)}"
                except (grpc.RpcError, VTGateError) as exc:
                    last = str(exc)[:300]
                    if reloaded and time.monotonic() - reloaded > TRACKING_GRACE:
                        raise _Untracked(f"VTGate's schema tracking did not learn the tables within "
                                         f"{TRACKING_GRACE:.0f} s of the reload ({last})") from exc
                time.sleep(0.5)  # polling the cluster's start, not synchronising a test
        raise TimeoutError(f"Vitess not ready within {self.start_timeout:.0f}s ({last}): "
                           f"{self.procs.log_tail('vttestserver')}")

    def reload_schema(self) -> None:
        """Every tablet reloads its schema, the primaries too: VTGate's schema tracking listens to
        them alone (ReloadSchemaKeyspace leaves them out unless asked)."""
        self.procs.run(["vtctldclient", "--server", self.vtctld, "ReloadSchemaKeyspace", "--include-primary",
                        self.keyspace])

    def stop(self) -> None:
        self.procs.stop_all()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> VTTestServer:
        return self.start()

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
