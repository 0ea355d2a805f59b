"""How a run ends (the second half of `app.engine.loop.ReactRun`): an answer accepted, graded
against the run's outcome first when it has one (DESIGN §22); the degraded final answer at a
limit; the end that cancel, the deadline or a failing model forced; and the one `Finished`.

An answer of a run with an outcome is graded (`app.engine.grading`) before it ends the run:
met, the run ends as it would have; unmet, the grader's feedback goes back to the model
(intervention `outcome_unmet`: after a `task_finished` call, as that call's `is_error`
result; after a plain answer, as a user message) and the run goes on, until `max_revisions`
revisions were unmet too: the run ends `incomplete`, `outcome_unmet`, with that last answer,
degraded. An answer given once the cost budget is passed is not graded (no call starts past
it): the run ends `cost_budget` with that answer, degraded. The verdict is kept in the run's
state (`RunState.verdict`) until the model answers again, so a run resumed from the
checkpoint after it does not ask again. The degraded final answer at a limit is graded once,
for the record, within the final call's own time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from app.engine.asking import ask
from app.engine.context import RunContext
from app.engine.errors import LLMError
from app.engine.grading import Outcome, Verdict, grade
from app.engine.guard import CancelRequestedError, DeadlineError
from app.engine.policies import (
    LIMIT_INTERVENTIONS,
    InterventionKind,
    StopReason,
    final_call_allowed,
    revisions_exhausted,
)
from app.engine.ports import OutputError, Reply
from app.engine.prompts import TASK_FINISHED
from app.engine.steps import (
    Checkpoint,
    Finished,
    Observation,
    OutcomeGraded,
    RunError,
    Step,
)
from app.engine.typed import CheckedAnswer, check_text, limit_text


class Ending:
    """The ends of a run; mixed into `ReactRun`, whose fields these are."""

    run: RunContext
    task: str
    outcome: Outcome | None
    ended: bool
    checkpointed: tuple[int, int] | None

    def _checkpoint(self) -> Checkpoint:
        raise NotImplementedError

    # -- an answer, graded when the run has an outcome -----------------------------------

    async def _accept(
        self, reason: StopReason, answer: str, output: Any = None, call_ids: tuple[str, ...] = ()
    ) -> AsyncIterator[Step]:
        """The model gave `answer` (its value `output`, typed; `call_ids`: by `task_finished`,
        the reply's calls, which each get the feedback as its result when it is unmet).
        Without an outcome it ends the run; with one, the grader decides (see the module doc).
        A grader interrupted by the deadline, a cancel or failures raises, as any call does."""
        outcome, st = self.outcome, self.run.state
        if outcome is None:
            for ending in self._end(reason, answer, output=output):
                yield ending
            return
        budget = self.run.limits.max_cost_usd
        if st.verdict is not None:  # given before the run was resumed: not asked again
            verdict = Verdict.from_dict(st.verdict)
        elif budget is not None and st.tree_cost_usd > budget:  # no call once it is passed
            self.run.log.info("answer_not_graded", reason=StopReason.COST_BUDGET.value)
            spent = self._end(StopReason.COST_BUDGET, answer, degraded=True, output=output)
            for last in spent:
                yield last
            return
        else:
            found: Verdict | None = None
            try:
                async for item in grade(self.run, outcome, self.task, answer, self.run.deadline):
                    if isinstance(item, Verdict):
                        found = item
                    else:
                        yield item
            except DeadlineError:
                text = self.run.prompts.call_interrupted.format(
                    tool=TASK_FINISHED, reason=StopReason.TIMEOUT.value
                )
                for call_id in call_ids:  # each call gets its result before the final call
                    st.append({"role": "tool", "tool_call_id": call_id, "content": text})
                raise
            assert found is not None
            verdict, revision = found, st.revisions
            if not verdict.satisfied:
                st.revisions += 1
            st.verdict = verdict.to_dict()
            self.checkpointed = None  # the verdict is in the next checkpoint, whatever else
            yield OutcomeGraded(
                st.step, verdict.satisfied, verdict.feedback, revision, False, verdict.valid
            )
        if verdict.satisfied:
            for ending in self._end(reason, answer, output=output):
                yield ending
            return
        if revisions_exhausted(st.revisions, self.run.limits) is not None:
            for ending in self._end(StopReason.OUTCOME_UNMET, answer, degraded=True, output=output):
                yield ending
            return
        left = self.run.limits.max_revisions - st.revisions + 1
        text = self.run.prompts.outcome_unmet.format(feedback=verdict.feedback, revisions_left=left)
        st.verdict = None  # the next answer is another one, graded anew
        if not call_ids:
            yield self.run.inject(InterventionKind.OUTCOME_UNMET, text)
            return
        yield self.run.intervention(InterventionKind.OUTCOME_UNMET, text)
        for call_id in call_ids:
            st.append({"role": "tool", "tool_call_id": call_id, "content": text})
            yield Observation(st.step, call_id, TASK_FINISHED, text, True)

    async def _graded_once(self, answer: str, deadline: float) -> AsyncIterator[Step]:
        """The degraded final answer at a limit, graded once for the record (its verdict is
        shown; the run ends with its limit either way), within `deadline`; a grader that
        fails or runs out of time gives no verdict. With an output schema, an answer that
        fails it is not graded (the schema first)."""
        run, outcome = self.run, self.outcome
        if outcome is None or not final_call_allowed(run.state.tree_cost_usd, run.limits):
            return
        if run.output is not None and not check_text(run.output, answer).valid:
            return
        try:
            async for item in grade(run, outcome, self.task, answer, deadline):
                if isinstance(item, Verdict):
                    st = run.state
                    yield OutcomeGraded(
                        st.step, item.satisfied, item.feedback, st.revisions, True, item.valid
                    )
                else:
                    yield item
        except (DeadlineError, LLMError) as exc:
            run.log.warning("final_answer_not_graded", error=str(exc) or "deadline")

    # -- limits and interruptions ---------------------------------------------------------

    async def _stopped(self, exc: Exception) -> AsyncIterator[Step]:
        """The end of a run that cancel, the deadline or a failing model interrupted."""
        if isinstance(exc, DeadlineError):
            async for step in self._final_answer(StopReason.TIMEOUT):
                yield step
        else:  # a failing model ends it with error, a cancel with cancelled
            error = RunError(exc.kind, exc.message) if isinstance(exc, LLMError) else None
            reason = StopReason.ERROR if error else StopReason.CANCELLED
            for ending in self._end(reason, error=error):
                yield ending

    async def _final_answer(self, reason: StopReason) -> AsyncIterator[Step]:
        """Graceful degradation at a limit: one more call, without tools, for a best answer
        (graded once, in the same time, when the run has an outcome)."""
        if not final_call_allowed(self.run.state.tree_cost_usd, self.run.limits):
            for ending in self._end(reason):
                yield ending
            return
        prompt = limit_text(self.run.prompts, reason.value, self.run.output)
        yield self.run.inject(LIMIT_INTERVENTIONS[reason], prompt)
        reply: Reply | None = None
        deadline = self.run.clock() + self.run.limits.final_answer_timeout_s
        try:
            async for item in ask(self.run, (), deadline, final=True):
                if isinstance(item, Reply):
                    reply = item
                else:
                    yield item
            answer = reply.content if reply is not None and reply.content else None
            if answer is not None:
                self.run.state.append({"role": "assistant", "content": answer})
                async for item in self._graded_once(answer, deadline):
                    yield item
        except CancelRequestedError:
            for ending in self._end(StopReason.CANCELLED):
                yield ending
            return
        except (DeadlineError, LLMError) as exc:
            self.run.log.warning(
                "final_answer_failed", reason=reason.value, error=str(exc) or "deadline"
            )
        answer = reply.content if reply is not None and reply.content else None
        for ending in self._end(reason, answer, degraded=answer is not None):
            yield ending

    def _invalid_output(self, checked: CheckedAnswer) -> list[Step]:
        """The answers kept failing the schema: the run ends with the last one's errors."""
        errors = checked.errors
        return self._end(StopReason.INVALID_OUTPUT, checked.text, degraded=True, invalid=errors)

    def _end(
        self,
        reason: StopReason,
        answer: str | None = None,
        *,
        degraded: bool = False,
        error: RunError | None = None,
        output: Any = None,
        invalid: tuple[OutputError, ...] | None = None,
    ) -> list[Step]:
        """The run's last steps: its final conversation, for a follow-up to start from (when
        not checkpointed as it is already), then the one `Finished`. With an output schema, a
        degraded answer (at a limit, at nudge_limit) is checked here: its value, or why not."""
        st = self.run.state
        if degraded and answer is not None and self.run.output is not None and invalid is None:
            checked = check_text(self.run.output, answer)
            answer, output, invalid = checked.text, checked.output, checked.errors or None
        usage = st.usage()
        self.ended = True
        self.run.log.info("run_finished", reason=reason.value, degraded=degraded, **usage.to_dict())
        last: list[Step] = []
        if self.checkpointed != (st.step, len(st.messages)):
            last.append(self._checkpoint())
        last.append(Finished(st.step, reason, answer, degraded, usage, error, output, invalid))
        return last
