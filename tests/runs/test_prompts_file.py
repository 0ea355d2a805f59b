"""FINISHLINE_PROMPTS_FILE: a deployment overrides the texts the model sees from us."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.engine.prompts import EN, ZH, load_prompts
from tests.fakes.service import api_client, service_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "prompts.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_gives_the_builtin_texts() -> None:
    assert load_prompts(None) == {"en": EN, "zh": ZH}


def test_a_file_overrides_only_the_texts_it_names(tmp_path: Path) -> None:
    prompts = load_prompts(
        write(tmp_path, '[en]\nstop_tool_prompt = "Done? Call task_finished."\n')
    )
    assert prompts["en"].stop_tool_prompt == "Done? Call task_finished."
    assert prompts["en"].tool_timeout == EN.tool_timeout
    assert prompts["zh"] == ZH


def test_an_unknown_text_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown prompt names: stop_prompt"):
        load_prompts(write(tmp_path, '[en]\nstop_prompt = "x"\n'))


def test_an_unknown_language_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown prompt languages"):
        load_prompts(write(tmp_path, '[fr]\nstop_tool_prompt = "x"\n'))


async def test_a_run_sees_the_overridden_text(tmp_path: Path) -> None:
    path = write(tmp_path, '[en]\nstop_tool_prompt = "CUSTOM STOP PROMPT"\n')
    script = [
        {"content": "hmm"},
        {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "a"}}]},
    ]
    async with api_client(service_settings(prompts_file=path)) as client:
        run = (
            await client.post(
                "/runs", json={"task": "t", "model": "scripted", "model_script": script}
            )
        ).json()
        await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 5})
        page = (
            await client.get(f"/runs/{run['id']}/events", headers={"Accept": "application/json"})
        ).json()
    nudges = [
        e for e in page["events"] if e["type"] == "intervention" and e["kind"] == "stop_prompt"
    ]
    assert [n["message"] for n in nudges] == ["CUSTOM STOP PROMPT"]


async def test_a_planned_run_sees_the_overridden_planning_texts(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[zh]\nplanning_prompt = "先计划"\nplanning_nudge = "请调用 update_plan"\n'
    )
    script = [
        {"content": "no plan"},
        {"content": "still none"},
        {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "a"}}]},
    ]
    body = {
        "task": "t",
        "model": "scripted",
        "model_script": script,
        "settings": {"planning_interval": 1, "prompt_language": "zh"},
    }
    async with api_client(service_settings(prompts_file=path)) as client:
        run = (await client.post("/runs", json=body)).json()
        await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": 5})
        page = (
            await client.get(f"/runs/{run['id']}/events", headers={"Accept": "application/json"})
        ).json()
    planning = [
        e["message"]
        for e in page["events"]
        if e["type"] == "intervention" and e["kind"] == "planning"
    ]
    assert planning == ["先计划", "请调用 update_plan"]
