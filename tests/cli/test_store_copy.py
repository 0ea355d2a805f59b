"""`finishline store copy FROM_URL TO_URL` (DESIGN §18): every run (record, events,
checkpoint, threads) from SQLite to Postgres and back; resumable (a second copy, or one cut
short, goes on where it was); verified; never overwriting a different run of the same id."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import anyio

from app.cli import main
from app.runs.records import RunRecord, new_run_id
from app.runs.reports.groups import GroupBy
from app.runs.reports.summaries import RunFilter
from app.runs.store import Checkpoint, RunStore
from app.runs.stores.copying import all_events, events_digest
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.sqlite import SqliteRunStore
from app.store_copy import copy


def record(**fields: object) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "owner": "alice",
            "request": {"task": "add two numbers"},
            "model": "scripted",
            "settings": {},
            **fields,
        }
    )


async def filled(store: RunStore, count: int) -> list[RunRecord]:
    runs = []
    for i in range(count):
        run = record(status="completed" if i % 2 else "running")
        await store.create(run)
        for n in range(3 + i):
            await store.append(run.id, "thought", n, {"text": f"step {n}", "i": i})
        await store.save_checkpoint(run.id, 2, {"messages": [{"role": "user", "content": "hi"}]})
        await store.save(run)
        runs.append(run)
    await store.threads.advance("alice", "t1", expected=None, run_id=runs[0].id, at=1.0)
    await store.threads.advance("alice", "t1", expected=runs[0].id, run_id=runs[1].id, at=2.0)
    return runs


async def assert_same(source: RunStore, target: RunStore, runs: list[RunRecord]) -> None:
    for run in runs:
        assert await target.get(run.id) == run
        there, here = await all_events(target, run.id), await all_events(source, run.id)
        assert events_digest(there) == events_digest(here)
        assert await target.load_checkpoint(run.id) == Checkpoint(
            2, {"messages": [{"role": "user", "content": "hi"}]}
        )
    assert await target.threads.thread_runs("alice", "t1") == [runs[0].id, runs[1].id]


async def report_of(store: RunStore) -> list[dict[str, Any]]:
    return await store.termination_report(
        owner="alice", any_owner=False, matching=RunFilter(), group_by=GroupBy.MODEL
    )


async def test_sqlite_to_postgres_and_back_copies_every_run_and_verifies_it(
    tmp_path: Path, postgres_url: str
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'from.db'}"
    source = SqliteRunStore(str(tmp_path / "from.db"))
    await source.open()
    runs = await filled(source, 4)
    await source.close()

    report = await copy(sqlite_url, postgres_url, out=io.StringIO())
    assert (report.total, report.copied, report.threads, report.ok) == (4, 4, 1, True)
    again = await copy(sqlite_url, postgres_url, out=io.StringIO())  # resumable: nothing to do
    assert (again.copied, again.skipped, again.ok) == (0, 4, True)

    back_url = f"sqlite:///{tmp_path / 'back.db'}"
    back = await copy(postgres_url, back_url, out=io.StringIO())
    assert (back.copied, back.ok) == (4, True)

    source, target = SqliteRunStore(str(tmp_path / "from.db")), PostgresRunStore(postgres_url)
    returned = SqliteRunStore(str(tmp_path / "back.db"))
    for store in (source, target, returned):
        await store.open()
    try:
        await assert_same(source, target, runs)
        for run in runs:  # into Postgres, the events keep their timestamps
            assert await all_events(target, run.id) == await all_events(source, run.id)
        await assert_same(source, returned, runs)
        for store in (target, returned):  # the ended ones' summaries came with them
            assert await store.unsummarized(10) == []
            assert await report_of(store) == await report_of(source)
        assert sum(group["runs"] for group in await report_of(target)) == 2
    finally:
        for store in (source, target, returned):
            await store.close()


async def test_a_copy_cut_short_goes_on_and_a_different_run_is_never_overwritten(
    tmp_path: Path,
) -> None:
    source = SqliteRunStore(str(tmp_path / "from.db"))
    target = SqliteRunStore(str(tmp_path / "to.db"))
    await source.open()
    await target.open()
    runs = await filled(source, 3)
    cut = runs[0]  # copied halfway before the copy stopped: its record, two of its events
    await target.create(cut)
    for event in (await all_events(source, cut.id))[:2]:
        await target.append(cut.id, event.type, event.step, event.data)
    other = record(id=runs[1].id, request={"task": "another run"})  # the same id, not the run
    await target.create(other)
    await source.close()
    await target.close()

    stderr = io.StringIO()
    argv = ["store", "copy", f"sqlite:///{tmp_path / 'from.db'}", f"sqlite:///{tmp_path / 'to.db'}"]
    code = await anyio.to_thread.run_sync(main, argv)  # the command line, as a user runs it
    assert code == 1  # a conflict is not a clean copy
    report = await copy(
        f"sqlite:///{tmp_path / 'from.db'}", f"sqlite:///{tmp_path / 'to.db'}", out=stderr
    )
    assert report.conflicts == [runs[1].id]
    assert report.skipped == 2  # the one finished by the first copy, and the third
    target = SqliteRunStore(str(tmp_path / "to.db"))
    source = SqliteRunStore(str(tmp_path / "from.db"))
    await target.open()
    await source.open()
    try:
        assert await target.get(runs[1].id) == other  # left as it was
        assert events_digest(await all_events(target, cut.id)) == events_digest(
            await all_events(source, cut.id)
        )
    finally:
        await target.close()
        await source.close()
