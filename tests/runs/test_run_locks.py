"""`RunLocks`: a replica's takes of one run's messages go one at a time, other runs' meanwhile
(one lock for all made every run's start and end wait for every other's commit)."""

from __future__ import annotations

import asyncio

from app.runs.inbox import RunLocks


async def test_one_run_waits_for_itself_and_not_for_another_run() -> None:
    locks = RunLocks()
    release, holding = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def hold(run_id: str, name: str, *, until: asyncio.Event | None = None) -> None:
        async with locks.held(run_id):
            order.append(name)
            holding.set()
            if until is not None:
                await until.wait()

    first = asyncio.create_task(hold("run-a", "a1", until=release))
    await asyncio.wait_for(holding.wait(), 5)  # a1 holds run-a's lock
    second = asyncio.create_task(hold("run-a", "a2"))
    other = asyncio.create_task(hold("run-b", "b1"))
    await asyncio.wait_for(other, 5)  # run-b's take went on while run-a's was held
    assert order == ["a1", "b1"]
    assert not second.done()
    release.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert order == ["a1", "b1", "a2"]
    assert len(locks) == 0  # nothing kept once no one holds or waits


async def test_a_holder_that_fails_lets_the_next_in() -> None:
    locks = RunLocks()

    async def fails() -> None:
        async with locks.held("run-a"):
            raise RuntimeError("a take failed")

    results = await asyncio.gather(fails(), fails(), return_exceptions=True)
    assert [type(r) for r in results] == [RuntimeError, RuntimeError]
    async with locks.held("run-a"):
        assert len(locks) == 1
    assert len(locks) == 0
