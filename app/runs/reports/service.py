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
from pydantic import ValidationError

from app.runs.admission import Admission
from app.runs.errors import InvalidRunError, RunNotEndedError
from app.runs.ports import RunAssembler
from app.runs.records import Event, ForkedFrom, RunRecord
from app.runs.reports.compare import compared
from app.runs.reports.groups import GroupBy
from app.runs.reports.replay import divergence, on_record, replayed, shown, state_before
from app.runs.reports.summaries import RunFilter, summarize, tally_of
from app.runs.spec import RunRequest
from app.runs.store import RunStore

log = structlog.get_logger("finishline.runs")

PAGE = 200
EVENTS_PAGE = 1000


class Reports:
    def __init__(
        self,
        store: RunStore,
        assembler: RunAssembler | None = None,
        admission: Admission | None = None,
    ) -> None:
        self.store = store
        self.assembler = assembler
        self.admission = admission

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
            on_record(inputs, events, record.result.answer if record.result else None)
            made = await replayed(inputs, record.id)
        finally:
            await inputs.aclose()
        return divergence(shown(events), made)

    async def fork(
        self, record: RunRecord, at_step: int, overrides: Mapping[str, Any], owner: str | None
    ) -> RunRecord:
        """A new run (queued) whose conversation is the ended `record`'s before `at_step`,
        going on live with `overrides` (model, agent, settings merged key by key,
        system_prompt, tools, task; the last two at step 1 only: later, the conversation
        holds the run's own). With `agent`, the run's request is not carried (the task
        excepted): the profile's values are the defaults, as in POST /runs. Admitted as any
        run (quotas, caps)."""
        for name in ("system_prompt", "task"):
            if name in overrides and at_step > 1:
                raise InvalidRunError(
                    name, "the conversation before that step holds the run's own: fork at step 1"
                )
        state = await self.fork_state(record, at_step)
        body = record.request.model_dump(mode="json", exclude_none=True)
        body.pop("previous_run_id", None)
        if "agent" in overrides:  # another profile: its values, not the run's, are the defaults
            body = {"task": body["task"]}
        settings = {**body.get("settings", {}), **overrides.get("settings", {})}
        body.update({**overrides, "settings": settings})
        assert self.admission is not None, "a fork needs admission"
        try:
            request = RunRequest.model_validate(body)
        except ValidationError as exc:  # an override that does not fit a run's request
            first = exc.errors(include_url=False, include_input=False)[0]
            field = ".".join(str(part) for part in first["loc"]) or "body"
            raise InvalidRunError(field, str(first["msg"])) from None
        run, _ = await self.admission.create(
            request,
            owner=owner,
            fork=(ForkedFrom(run_id=record.id, step=at_step), state),
        )
        return run

    async def fork_state(self, record: RunRecord, at_step: int) -> dict[str, Any] | None:
        """The engine state a fork of the ended `record` at `at_step` starts from (its
        conversation before that step, replayed: no model or tool called); None for step 1,
        the start. `InvalidRunError` for a step the run did not reach."""
        if not record.status.terminal:
            raise RunNotEndedError(record.id)
        last = max(1, record.usage.steps)
        if not 1 <= at_step <= last:
            raise InvalidRunError("at_step", f"must be from 1 to {last}, the run's steps")
        if at_step == 1:
            return None
        assert self.assembler is not None, "a fork needs the run assembler"
        events = await self._events(record.id)
        inputs = await self.assembler.inputs(record)
        try:
            on_record(inputs, events, record.result.answer if record.result else None)
            return await state_before(inputs, record.id, at_step)
        finally:
            await inputs.aclose()

    async def _events(self, run_id: str) -> list[Event]:
        events: list[Event] = []
        after = 0
        while True:
            page = await self.store.read(run_id, after=after, limit=EVENTS_PAGE)
            events += page
            if len(page) < EVENTS_PAGE:
                return events
            after = page[-1].seq
