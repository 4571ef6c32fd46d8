"""Reconcile requests that a later reconcile has served are dropped (issue 30): the resync timer and
pod kicks skip their pass when a reconcile that began after they asked has completed meanwhile;
at 1,024 shards each pass takes seconds, and queued timer passes doubled a scale's work."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
import pytest

from cdcoperator import handlers


class Pods:
    async def pods(self, _namespace: str, _name: str) -> list[object]:
        return []


async def _scenario(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    ran: list[str] = []
    gates: dict[str, asyncio.Event] = {}

    async def reconcile(ctx: Any, _namespace: str, _name: str) -> None:
        ran.append(ctx)
        gate = gates[ctx] = asyncio.Event()
        await gate.wait()

    monkeypatch.setattr(handlers, "reconcile", reconcile)
    labels = iter(["A", "K", "T1", "T2"])
    monkeypatch.setattr(handlers, "_context", lambda *_: next(labels))
    memo = kopf.Memo(pods=Pods(), kicks={}, served={}, stats={"reconciles": 0})

    async def until(label: str) -> None:
        while label not in gates:
            await asyncio.sleep(0)

    a = asyncio.create_task(handlers._run(memo, "ns", "c"))  # a spec change: always runs
    await until("A")
    k = asyncio.create_task(handlers._run(memo, "ns", "c", why="kicked", coalesce=True))
    await asyncio.sleep(0)
    gates["A"].set()  # A began before the kick asked: the kick still runs
    await until("K")
    t1 = asyncio.create_task(handlers._run(memo, "ns", "c", why="resync", coalesce=True))
    t2 = asyncio.create_task(handlers._run(memo, "ns", "c", why="resync", coalesce=True))
    await asyncio.sleep(0)
    gates["K"].set()  # both asked while K ran: the first runs, and serves the second
    await until("T1")
    gates["T1"].set()
    await asyncio.gather(a, k, t1, t2)
    assert memo.stats["reconciles"] == 3
    # A request made after the last reconcile began is not served by it.
    t3 = asyncio.create_task(handlers._run(memo, "ns", "c", why="resync", coalesce=True))
    await until("T2")  # the next label _context hands out
    gates["T2"].set()
    await t3
    return ran


def test_a_reconcile_that_began_after_a_request_serves_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert asyncio.run(_scenario(monkeypatch)) == ["A", "K", "T1", "T2"]
