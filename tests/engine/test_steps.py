"""Each event's payload is every field but `step`, in field order: the events that spell
theirs out for speed (app/engine/steps.py) are held to their fields here."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from app.engine import steps
from app.engine.policies import InterventionKind

EVENTS = sorted(
    (
        cls
        for cls in vars(steps).values()
        if isinstance(cls, type) and issubclass(cls, steps._Event) and cls is not steps._Event
    ),
    key=lambda cls: cls.__name__,
)


def _sample(field: dataclasses.Field[Any], index: int) -> Any:
    if field.name == "kind":
        return InterventionKind.PROGRESS
    return f"value-{index}"  # a distinct value per field, whatever its declared type


@pytest.mark.parametrize("cls", EVENTS, ids=lambda cls: cls.__name__)
def test_payload_is_every_field_but_step_in_order(cls: type[Any]) -> None:
    fields = dataclasses.fields(cls)
    event = cls(*(_sample(f, i) for i, f in enumerate(fields)))
    payload = event.payload()
    shown = [f for f in fields if f.name != "step" and f.metadata.get("event", True)]
    expected = {f.name: getattr(event, f.name) for f in shown}
    assert list(payload) == list(expected)
    assert payload == expected


def test_every_event_class_is_checked() -> None:
    names = {cls.__name__ for cls in EVENTS}
    assert {"StepStarted", "LLMCalled", "Action", "Observation", "Intervention"} <= names
    assert {"AgentStarted", "AgentFinished", "OutcomeGraded"} <= names
    assert len(names) == 13
