"""Reports over a store's run summaries (DESIGN §20), and the backfill that gives runs
which ended before summaries were kept theirs.

The backfill runs once per start, in the background (`RunManager.start`): it pages through
`RunStore.unsummarized`, tallies each run's events (`app.runs.reports.summaries.tally_of`) and keeps
its summary (`RunStore.save_summary`). Until it is done, a report leaves those runs out; a
run that ends meanwhile has its summary written with its terminal record as always."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from app.runs.errors import RunNotEndedError
from app.runs.ports import RunAssembler
from app.runs.records import Event, RunRecord
from app.runs.reports.compare import compared
from app.runs.reports.groups import GroupBy
from app.runs.reports.replay import (
    ReplayModel,
    divergence,
    recorded_replies,
    replay_tools,
    replayed,
    shown,
)
from app.runs.reports.summaries import RunFilter, summarize, tally_of
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")

PAGE = 200
EVENTS_PAGE = 1000


class Reports:
    def __init__(self, store: RunStore, assembler: RunAssembler | None = None) -> None:
        self.store = store
        self.assembler = assembler

    async def termination(
        self, *, owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
    ) -> list[dict[str, Any]]:
        """The termination report's groups over the owner's runs (every owner's with
        `any_owner`) that `matching` admits."""
        return await self.store.termination_report(
            owner=owner, any_owner=any_owner, matching=matching, group_by=group_by
        )

    async def backfill(self) -> None:
        """Summarize every ended run that has no summary (`summarized`: how many). Never
        raises (a failure is logged: the next start tries again)."""
        await self.summarized()

    async def summarized(self) -> int:
        """As `backfill`; how many runs it summarized."""
        made = 0
        try:
            after: str | None = None
            while True:
                found = await self.store.unsummarized(PAGE, after=after)
                for run_id, record in found:
                    after = run_id
                    if record is None:  # unreadable (logged when read): left out
                        continue
                    tally = tally_of((e.type, e.data) for e in await self._events(run_id))
                    await self.store.save_summary(summarize(record, tally))
                    made += 1
                if len(found) < PAGE:
                    break
        except Exception:  # a background task: it must not take the service down
            log.exception("summary_backfill_failed", summarized=made)
            return made
        if made:
            log.info("summaries_backfilled", summarized=made)
        return made

    async def compare(self, records: Sequence[RunRecord]) -> dict[str, Any]:
        """The runs side by side (`compare.compared`), their events read whole."""
        return compared([(record, await self._events(record.id)) for record in records])

    async def replay(
        self, record: RunRecord, settings: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The ended run's replay (`replay` module): `{identical, events, first_divergence}`;
        `settings` change the run's own for the replay. `RunNotEndedError` for a run that has
        not ended. Nothing is stored, no model or tool is called."""
        if not record.status.terminal:
            raise RunNotEndedError(record.id)
        assert self.assembler is not None, "replay needs the run assembler"
        events = await self._events(record.id)
        run = record.model_copy(deep=True)
        if settings:
            run.settings = dataclasses.replace(run.settings, **settings)
        inputs = await self.assembler.inputs(run)
        try:
            answer = record.result.answer if record.result is not None else None
            real = inputs.model
            replies = recorded_replies(events, answer)
            inputs.model = ReplayModel(real.name, getattr(real, "price", None), replies)
            replay_tools(inputs, events)
            made = await replayed(inputs, record.id)
        finally:
            await inputs.aclose()
        return divergence(shown(events), made)

    async def _events(self, run_id: str) -> list[Event]:
        events: list[Event] = []
        after = 0
        while True:
            page = await self.store.read(run_id, after=after, limit=EVENTS_PAGE)
            events += page
            if len(page) < EVENTS_PAGE:
                return events
            after = page[-1].seq
