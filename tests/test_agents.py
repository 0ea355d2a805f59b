"""FINISHLINE_AGENTS parsed (JSON or @path), its shape checked at start-up with one line per
problem naming the profile and the field, and a profile applied to a request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.agents import PROFILE_FIELDS, apply_profile, parse_agents
from app.runs.spec import RunRequest
from app.settings import Settings

PROFILE = {
    "description": "Researches.",
    "system_prompt": "Be careful.",
    "tools": ["calculator", "current_time"],
    "settings": {"planning_interval": 2, "max_steps": 6},
}


def test_profiles_come_from_json_text_or_a_file(tmp_path: Path) -> None:
    text = json.dumps({"researcher": PROFILE})
    path = tmp_path / "agents.json"
    path.write_text(text, encoding="utf-8")
    for value in (text, f"@{path}"):
        (profile,) = parse_agents(value).values()
        assert (profile.name, profile.description) == ("researcher", "Researches.")
        assert profile.fields == ["system_prompt", "tools", "settings"]
        assert profile.defaults.settings.planning_interval == 2
    assert parse_agents("") == {}


def test_the_environment_variable_sets_the_servers_profiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FINISHLINE_AGENTS", json.dumps({"researcher": PROFILE}))
    assert list(Settings(_env_file=None).agents) == ["researcher"]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{oops", "FINISHLINE_AGENTS: invalid JSON"),
        ("[]", "must be a JSON object of profile name -> profile"),
        ('{"a b": {"description": "d"}}', "profile name 'a b': use 1 to 64 letters"),
        ('{"x": "no"}', "profile 'x': must be an object with a description"),
        ('{"x": {"tools": []}}', "profile 'x': description: required, a non-empty string"),
        (
            '{"x": {"description": "d", "webhook": "https://a.test"}}',
            "profile 'x': unknown field 'webhook'",
        ),
        (
            '{"x": {"description": "d", "settings": {"max_stepz": 2}}}',
            "profile 'x': settings.max_stepz: Extra inputs are not permitted",
        ),
        (
            '{"x": {"description": "d", "settings": {"planning_interval": 0}}}',
            "profile 'x': settings.planning_interval: Input should be greater than or equal to 1",
        ),
        (
            '{"x": {"description": "d", "http_tools": [{"name": "bad name", "url": "u", '
            '"description": "t"}]}}',
            "profile 'x': http_tools[0].name: String should match pattern",
        ),
        (
            '{"x": {"description": "d", "tools": "calculator"}}',
            "profile 'x': tools: Input should be a valid list",
        ),
    ],
)
def test_a_bad_profile_is_refused_naming_the_profile_and_the_field(
    value: str, problem: str
) -> None:
    with pytest.raises(ValueError, match="FINISHLINE_AGENTS") as raised:
        parse_agents(value)
    assert problem in str(raised.value)
    with pytest.raises(ValidationError, match="FINISHLINE_AGENTS"):
        Settings(_env_file=None, agents=value)


SAMPLES = {
    "agents": {"helper": {"description": "Helps."}},
    "output_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
}
"""A value of the fields DESIGN §14 lists that runs took last (typed answers, sub-agents)."""


def test_every_field_design_lists_for_a_profile_is_one_runs_take() -> None:
    assert [f for f in PROFILE_FIELDS if f not in RunRequest.model_fields] == []


@pytest.mark.parametrize("field", sorted(SAMPLES))
def test_a_profiles_value_of_a_field_runs_take_is_their_default(field: str) -> None:
    value = {"x": {"description": "d", field: SAMPLES[field]}}
    (profile,) = parse_agents(value).values()
    run = apply_profile(RunRequest.model_validate({"task": "t", "agent": "x"}), profile)
    assert getattr(run, field) == getattr(profile.defaults, field)


SCHEMA = {"type": "object", "properties": {"verdict": {"enum": ["yes", "no"]}}}


def test_a_profiles_output_schema_is_a_default_the_request_may_replace() -> None:
    (profile,) = parse_agents({"x": {"description": "d", "output_schema": SCHEMA}}).values()
    assert profile.fields == ["output_schema"]
    run = apply_profile(RunRequest.model_validate({"task": "t", "agent": "x"}), profile)
    assert run.output_schema == SCHEMA
    own = {"type": "string"}
    request = RunRequest.model_validate({"task": "t", "agent": "x", "output_schema": own})
    assert apply_profile(request, profile).output_schema == own


def test_a_profiles_output_schema_is_validated_as_the_request_field() -> None:
    with pytest.raises(ValueError, match="profile 'x': output_schema: Input should be a valid"):
        parse_agents({"x": {"description": "d", "output_schema": [1]}})


def test_every_problem_is_named_at_once() -> None:
    value = {"a": {"description": ""}, "b": {"description": "d", "tools": [1]}}
    with pytest.raises(ValueError, match="FINISHLINE_AGENTS") as raised:
        parse_agents(value)
    assert "profile 'a': description" in str(raised.value)
    assert "profile 'b': tools[0]" in str(raised.value)


def test_an_unreadable_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"FINISHLINE_AGENTS file '.*nope\.json': cannot read"):
        parse_agents(f"@{tmp_path / 'nope.json'}")


def test_a_profile_is_the_requests_defaults_lists_replaced_settings_merged() -> None:
    (profile,) = parse_agents({"r": PROFILE}).values()
    request = RunRequest.model_validate(
        {"task": "t", "agent": "r", "tools": ["calculator"], "settings": {"max_steps": 3}}
    )
    run = apply_profile(request, profile)
    assert run.task == "t"
    assert run.agent == "r"
    assert run.system_prompt == "Be careful."  # the profile's: the request gave none
    assert run.tools == ["calculator"]  # the request's list, whole
    assert (run.settings.max_steps, run.settings.planning_interval) == (3, 2)
    assert run.settings.model_fields_set == {"max_steps", "planning_interval"}
    assert "system_prompt" in run.model_fields_set
    # the profile itself is untouched
    assert profile.defaults.tools == ["calculator", "current_time"]
    assert profile.defaults.settings.max_steps == 6


def test_a_profile_does_not_set_what_it_does_not_name() -> None:
    (profile,) = parse_agents({"q": {"description": "d"}}).values()
    request = RunRequest.model_validate({"task": "t", "agent": "q", "model": "demo"})
    run = apply_profile(request, profile)
    assert run.model_dump() == request.model_dump()
