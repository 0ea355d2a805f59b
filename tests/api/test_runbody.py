"""One way in for a run's body (`app.api.runbody.checked_run_body`): POST /runs, AG-UI and A2A
give it the parsed value; every refusal is named where the face's input holds the field, and
what it checked travels with the request (`within_caps`, `digest`), not as flags."""

from __future__ import annotations

import math

import pytest
from fastapi.exceptions import RequestValidationError

from app.api.errors import validation_problems
from app.api.runbody import checked_run_body
from app.engine.paths import field_path
from app.runs.errors import InvalidRunError
from app.runs.records import request_hash
from tests.api.kit import settings


def props(field: str) -> str:
    return f"forwardedProps.finishline.{field}"


def test_a_value_is_validated_as_given_and_marked_checked() -> None:
    body, request = checked_run_body({"task": "t", "tools": ["calculator"]}, settings())
    assert body.task == "t"
    assert request.within_caps
    assert request.digest == request_hash(request)
    _, unhashed = checked_run_body({"task": "t"}, settings(), hashed=False)
    assert unhashed.within_caps
    assert unhashed.digest is None


def test_each_refusal_names_where_the_face_holds_the_field() -> None:
    with pytest.raises(RequestValidationError) as unknown:
        checked_run_body({"task": "t", "tools": [1], "nope": 1}, settings(), where=props)
    fields = sorted(p["field"] for p in validation_problems(unknown.value))
    assert fields == [props("nope"), props("tools[0]")]

    with pytest.raises(RequestValidationError) as nan:
        checked_run_body({"task": "t", "metadata": {"x": [math.nan]}}, settings(), where=props)
    (problem,) = validation_problems(nan.value)
    assert problem["field"] == props("metadata.x[0]")

    with pytest.raises(InvalidRunError) as capped:
        checked_run_body({"task": "t" * 50}, settings(max_task_chars=10), where=props)
    assert capped.value.field == props("task")
    assert capped.value.details["cap"] == 10


def test_field_paths_have_one_form() -> None:
    assert field_path(("http_tools", 0, "url")) == "http_tools[0].url"
    assert field_path(("x", 2), "metadata") == "metadata.x[2]"
    assert field_path((0,)) == "[0]"
    assert field_path(()) == ""
