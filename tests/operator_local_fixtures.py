"""Reconciles against the local-mode cluster (the operator's ``ClusterApi`` in memory) with a
scripted source and scripted worker pods: what a reconcile test sets, not what it builds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from cdcoperator.adoption import Adoption
from cdcoperator.apply import Kind
from cdcoperator.discovery import Discovery
from cdcoperator.local.cluster import LocalCluster
from cdcoperator.reconcile import ReconcileContext, reconcile
from cdcoperator.taskstatus import PodSummary


def put_connector(cluster: LocalCluster, tasks: int = 2) -> None:
    """Connector ``default/c`` over keyspace ``ks``."""
    cluster.put_connector({
        "apiVersion": "shardcdc.io/v1alpha1", "kind": "CdcConnector", "metadata": {"name": "c"},
        "spec": {"source": {"vitess": {"vtgate": "127.0.0.1:1", "keyspace": "ks"}},
                 "kafka": {"bootstrapServers": "k:9092", "topicPrefix": "p"}, "tasks": tasks}})


@dataclass
class Scripted:
    """The source's shards and the worker pods a reconcile sees (change them between reconciles)."""

    serving: tuple[str, ...]
    discovered: tuple[str, ...]
    pods: list[PodSummary] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    expected: list[tuple[int, int]] = field(default_factory=list)  # what each plan ran: (generation, workers)

    def context(self, cluster: LocalCluster, http: aiohttp.ClientSession) -> ReconcileContext:
        async def discover(_cr: Any) -> Discovery:
            return Discovery(self.serving, self.discovered, "vtctld")

        async def scan(_cr: Any, _access: Any) -> Adoption:
            return Adoption()

        def emit(_body: Any, type_: str, reason: str, message: str) -> None:
            self.events.append((type_, reason, message))

        return ReconcileContext(kube=cluster, http=http, emit=emit, pods=lambda _ns, _c: self.pods,
                                discover=discover, scan_offsets=scan,
                                expect=lambda _ns, _c, gen, running: self.expected.append((gen, running)))


def pod(name: str, generation: int, task: int, phase: str = "Running", deleting: bool = False, **kw: Any) -> PodSummary:
    """A worker pod summary (running, no status document, no exit) unless ``kw`` says otherwise."""
    fields: dict[str, Any] = {"ip": None, "port": None, "ready": False, "waiting_reason": None, "exit_code": None,
                              "termination_message": "", "restarts": 0, **kw}
    return PodSummary(name=name, generation=generation, task=task, phase=phase, deleting=deleting, **fields)


def names(cluster: LocalCluster, kind: Kind) -> list[str]:
    """The names of connector ``default/c``'s children of ``kind``."""
    return sorted(o["metadata"]["name"] for o in cluster.children(kind, "default", "c"))


@contextlib.asynccontextmanager
async def two_tasks_running(tmp_path: Path, shards: tuple[str, ...]
                            ) -> AsyncIterator[tuple[LocalCluster, Scripted, ReconcileContext]]:
    """Connector ``default/c`` reconciled once with 2 tasks over ``shards``, both workers' pods up."""
    cluster = LocalCluster(tmp_path)
    put_connector(cluster, tasks=2)
    source = Scripted(serving=shards, discovered=shards)
    async with aiohttp.ClientSession() as http:
        ctx = source.context(cluster, http)
        await reconcile(ctx, "default", "c")
        source.pods[:] = [pod(f"c-g0-t{i}-a", 0, i, ready=True) for i in range(2)]
        yield cluster, source, ctx
