"""Reconcile requests that a later reconcile has served are dropped (issue 30,
``cdcoperator.serialrun``): the resync timer and pod kicks skip their pass when a reconcile that
began after they asked has completed meanwhile; a spec change always runs; one at a time."""

from __future__ import annotations

import asyncio

import pytest

from cdcoperator.serialrun import Served

KEY = ("ns", "c")


async def _scenario() -> tuple[list[str], list[bool]]:
    served, lock = Served(), asyncio.Lock()
    ran: list[str] = []
    gates: dict[str, asyncio.Event] = {}

    def request(label: str, coalesce: bool) -> asyncio.Task[tuple[bool, str | None]]:
        async def reconcile() -> str:
            ran.append(label)
            gate = gates[label] = asyncio.Event()
            await gate.wait()
            return label

        return asyncio.create_task(served.run(KEY, lock, reconcile, coalesce=coalesce))

    async def until(label: str) -> None:
        while label not in gates:
            await asyncio.sleep(0)

    a = request("A", coalesce=False)  # a spec change: always runs
    await until("A")
    k = request("K", coalesce=True)
    await asyncio.sleep(0)
    gates["A"].set()  # A began before the kick asked: the kick still runs
    await until("K")
    t1, t2 = request("T1", coalesce=True), request("T2", coalesce=True)
    await asyncio.sleep(0)
    gates["K"].set()  # both asked while K ran: the first runs and serves the second
    await until("T1")
    gates["T1"].set()
    outcomes = [ran_ for ran_, _ in await asyncio.gather(a, k, t1, t2)]
    # Asked after the last reconcile began: not served by it.
    t3 = request("T3", coalesce=True)
    await until("T3")
    gates["T3"].set()
    outcomes.append((await t3)[0])
    return ran, outcomes


def test_a_reconcile_begun_after_a_request_serves_it() -> None:
    ran, outcomes = asyncio.run(_scenario())
    assert ran == ["A", "K", "T1", "T3"]
    assert outcomes == [True, True, True, False, True]


def test_a_failed_reconcile_serves_nothing_and_stopped_skips() -> None:
    async def scenario() -> list[tuple[bool, int | None]]:
        served, lock = Served(), asyncio.Lock()

        async def fails() -> int:
            raise ConnectionError("the API server went away")

        async def works() -> int:
            return 7

        with pytest.raises(ConnectionError):
            await served.run(KEY, lock, fails)
        return [await served.run(KEY, lock, works, stopped=lambda: True),
                await served.run(KEY, lock, works, coalesce=True)]

    assert asyncio.run(scenario()) == [(False, None), (True, 7)]
