"""The `RunStore` contract for trees of runs (sub-agents, DESIGN §15), over every store: a
parent's children are listed by `parent_run_id`, and a tree's runs are counted once each,
never past the cap, however many ask at once."""

from __future__ import annotations

import asyncio

from app.runs.records import TreeLink
from tests.runs.test_store_contract import Store, created, store

__all__ = ["store"]  # the fixture, over memory, SQLite and Redis


async def test_list_runs_by_parent_run_id_shows_only_its_children(store: Store) -> None:
    parent = await created(store, owner="alice")
    link = {"root_run_id": parent.id, "depth": 1, "step": 1}
    children = [
        await created(
            store, owner="alice", parent_run_id=parent.id, parent_call_id=f"c{n}", tree=link
        )
        for n in range(3)
    ]
    await created(store, owner="alice", parent_run_id=children[0].id, tree=link)  # a grandchild
    await created(store, owner="alice")

    listed = await store.list_runs(owner="alice", parent_run_id=parent.id)

    assert listed == list(reversed(children))
    assert listed[0].tree == TreeLink(root_run_id=parent.id, depth=1, step=1)
    paged = await store.list_runs(owner="alice", parent_run_id=parent.id, before_id=children[2].id)
    assert paged == [children[1], children[0]]
    assert await store.list_runs(owner="bob", parent_run_id=parent.id) == []


async def test_a_tree_counts_each_member_once_and_never_past_its_cap(store: Store) -> None:
    root = await created(store)
    assert await store.add_tree_run(root.id, "a", cap=2)
    assert await store.add_tree_run(root.id, "a", cap=2)  # counted already: no new place
    assert await store.add_tree_run(root.id, "b", cap=2)
    assert not await store.add_tree_run(root.id, "c", cap=2)
    assert await store.add_tree_run(root.id, "b", cap=2)
    other = await created(store)
    assert await store.add_tree_run(other.id, "c", cap=2)  # trees apart


async def test_concurrent_members_of_one_tree_never_pass_the_cap(store: Store) -> None:
    root = await created(store)
    counted = await asyncio.gather(
        *(store.add_tree_run(root.id, f"m{n}", cap=5) for n in range(20))
    )
    assert sum(counted) == 5


async def test_a_run_with_agents_of_every_kind_reads_back_as_it_was_given(store: Store) -> None:
    agents = {
        "remote": {"description": "Far away.", "a2a_url": "https://agents.example.com/a2a/x"},
        "profiled": {"agent": "researcher"},
        "inline": {
            "description": "Computes.",
            "tools": ["calculator"],
            "settings": {"max_steps": 3},
            "agents": {"deeper": {"description": "Deeper.", "model": "scripted"}},
        },
    }
    run = await created(store, request={"task": "route", "agents": agents})
    again = await store.get(run.id)
    assert again == run
    assert again is not None
    assert again.request.model_dump(mode="json", exclude_none=True)["agents"] == agents
