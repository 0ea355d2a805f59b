"""The port through which a run is watched from outside the run layer (traces, in
`app.tracing`): the manager feeds it the run's record and the engine's typed steps, and knows
nothing of what it makes of them. With no observer (the default) nothing is called."""

from __future__ import annotations

from typing import Protocol

from app.engine.steps import Step
from app.runs.records import RunRecord


class RunTrace(Protocol):
    """One run, watched from its creation to its end."""

    @property
    def trace_id(self) -> str:
        """The run's trace id (32 hex digits), kept on the run and its `run.started` event."""
        ...

    def started(self) -> None:
        """The run leaves the queue; called in the run's own task (and so the tasks it starts
        inherit whatever context this sets)."""

    def step(self, step: Step) -> None:
        """One step of the engine, after it was recorded."""

    def call_traceparent(self, call_id: str) -> str | None:
        """The W3C trace context of one of the run's sub-agent calls in flight: its child
        run's trace continues from it (DESIGN §15); None when there is none."""

    def ended(self, record: RunRecord) -> None:
        """The run's record is terminal: its status, reason, usage and error are final."""


class RunObserver(Protocol):
    def open(self, record: RunRecord, traceparent: str | None) -> RunTrace:
        """A new run; `traceparent` is the caller's W3C trace context header, if any (an
        invalid one is ignored)."""
        ...


class RunTraces:
    """The traces of the runs this process created or executes, by run id (none without an
    observer)."""

    def __init__(self, observer: RunObserver | None) -> None:
        self.observer = observer
        self._traces: dict[str, RunTrace] = {}

    def open(self, record: RunRecord, traceparent: str | None) -> RunTrace | None:
        """A new run's trace (not kept until `keep`: the run may not be stored)."""
        return self.observer.open(record, traceparent) if self.observer is not None else None

    def keep(self, run_id: str, trace: RunTrace) -> None:
        self._traces[run_id] = trace

    def get(self, run_id: str) -> RunTrace | None:
        return self._traces.get(run_id)

    def call_traceparent(self, run_id: str, call_id: str) -> str | None:
        """The trace context a run's sub-agent call gives its child run, if traced here."""
        trace = self._traces.get(run_id)
        return trace.call_traceparent(call_id) if trace is not None else None

    def ended(self, record: RunRecord) -> None:
        trace = self._traces.pop(record.id, None)
        if trace is not None:
            trace.ended(record)
