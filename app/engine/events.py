"""Every type of event a run's log holds: a closed set, one name each for the engine (its
steps), the runs layer (a run's lifecycle), the API, the CLI and the viewer's JS."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    """The `type` of an event, in the order a run produces them."""

    RUN_QUEUED = "run.queued"
    """`{task, model, tools, settings, previous_run_id?, thread_id?, agent?, parent_run_id?,
    parent_call_id?}`: the run is stored and waits for a slot."""
    RUN_STARTED = "run.started"
    """`{trace_id?, resumed?}`: the run took a slot (`trace_id` when traced); again, with
    `resumed: true`, when it resumes after approvals."""
    STEP_STARTED = "step.started"
    """`{max_steps}`: a step (one LLM turn and the tool calls it makes) begins."""
    THOUGHT = "thought"
    """`{text}`: what the model said alongside (or instead of) its tool calls."""
    TOKEN = "token"
    """`{delta}`: a piece of the model's output as it streams (with `stream_tokens`)."""
    LLM_CALL = "llm.call"
    """`{model, duration_ms, prompt_tokens, completion_tokens, estimated, tool_calls, final}`:
    an LLM call that returned."""
    LLM_RETRY = "llm.retry"
    """`{attempt, error, delay_s}`: an LLM call failed and is retried after `delay_s`."""
    ACTION = "action"
    """`{call_id, tool, arguments}`: a tool call the model made, about to run."""
    OBSERVATION = "observation"
    """`{call_id, tool, content, is_error, truncated, original_chars, shown_chars, duration_ms,
    repeated, timed_out, model_content}`: a tool call's result. `content` is the whole result
    (up to `FINISHLINE_MAX_EVENT_CONTENT_CHARS`); `model_content` is what the model saw when it
    was truncated."""
    AGENT_STARTED = "agent.started"
    """`{call_id, agent, child_run_id}`: a sub-agent call started its child run."""
    AGENT_FINISHED = "agent.finished"
    """`{call_id, agent, child_run_id, status, reason}`: a sub-agent's child run ended."""
    INTERVENTION = "intervention"
    """`{kind, message}`: a message the runtime injected into the conversation (its kinds:
    the interventions table)."""
    OUTCOME_GRADED = "outcome.graded"
    """`{satisfied, feedback, revision, final, valid}`: the grader's verdict on an answer
    (DESIGN §22; with an `outcome`). `revision`: the answer's number after the first; `final`:
    the degraded final answer at a limit, graded for the record; `valid`: false when the grader
    gave no valid verdict (counted unmet)."""
    USER_MESSAGE = "user.message"
    """`{content, delivered}`: a steering message (`POST /runs/{id}/messages`)."""
    APPROVAL_REQUESTED = "approval.requested"
    """`{call_id, tool, arguments}`: a tool call that waits for a person's approval."""
    RUN_WAITING = "run.waiting"
    """`{pending}`: the run waits for a person or a client (DESIGN §19): the calls it waits on,
    each `{call_id, tool, arguments, requested_at, run_id?, agent_call_id?}`. Appended with
    (after) its record saved `requires_action`; not an end: the stream goes on."""
    APPROVAL_DECIDED = "approval.decided"
    """`{call_id, approved, message, arguments?, result?, run_id?}`: a decision on a waiting
    call (`run_id`: a child run's call)."""
    RUN_RECOVERED = "run.recovered"
    """`{replica, attempt}`: another replica took the run over (its lease expired) and goes on
    from its last checkpoint."""
    RUN_COMPLETED = "run.completed"
    """`{result, usage}`: the model finished (or answered, with `stop_tool` off)."""
    RUN_INCOMPLETE = "run.incomplete"
    """`{result, usage}`: a limit ended the run; `result.answer` may hold a degraded answer."""
    RUN_FAILED = "run.failed"
    """`{error, usage}`: the run failed; `error` says why."""
    RUN_CANCELLED = "run.cancelled"
    """`{usage}`: somebody cancelled the run."""

    @property
    def terminal(self) -> bool:
        """One of the four a run ends with, exactly once."""
        return self in TERMINAL_EVENT_TYPES


TERMINAL_EVENT_TYPES = frozenset(
    {
        EventType.RUN_COMPLETED,
        EventType.RUN_INCOMPLETE,
        EventType.RUN_FAILED,
        EventType.RUN_CANCELLED,
    }
)
