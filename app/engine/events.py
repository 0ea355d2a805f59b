"""Every type of event a run's log holds: a closed set, one name each for the engine (its
steps), the runs layer (a run's lifecycle), the API, the CLI and the viewer's JS."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    """The `type` of an event, in the order a run produces them."""

    RUN_QUEUED = "run.queued"
    RUN_STARTED = "run.started"
    STEP_STARTED = "step.started"
    THOUGHT = "thought"
    TOKEN = "token"
    LLM_CALL = "llm.call"
    LLM_RETRY = "llm.retry"
    ACTION = "action"
    OBSERVATION = "observation"
    AGENT_STARTED = "agent.started"
    AGENT_FINISHED = "agent.finished"
    INTERVENTION = "intervention"
    OUTCOME_GRADED = "outcome.graded"
    """The grader's verdict on an answer (DESIGN §22): `{satisfied, feedback, revision}`."""
    USER_MESSAGE = "user.message"
    APPROVAL_REQUESTED = "approval.requested"
    RUN_WAITING = "run.waiting"
    """The run waits for a person or a client (DESIGN §19): `{pending}`, the calls it waits
    on; appended with (after) its record saved `requires_action`."""
    APPROVAL_DECIDED = "approval.decided"
    RUN_RECOVERED = "run.recovered"
    RUN_COMPLETED = "run.completed"
    RUN_INCOMPLETE = "run.incomplete"
    RUN_FAILED = "run.failed"
    RUN_CANCELLED = "run.cancelled"

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
