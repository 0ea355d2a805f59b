"""Values JSON parsers let through that a run cannot carry: non-finite numbers, lone
UTF-16 surrogates, integers past 64 bits. Each is a 422 naming where it is, never a 5xx."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.api.kit import error_of, finishing, scripted, settings
from tests.fakes.service import api_client

HTTP_TOOL = {
    "name": "lookup",
    "description": "Look something up.",
    "url": "https://api.example.com/lookup",
}


def _raw(body: dict[str, Any], **raw_fields: str) -> str:
    """`body` as JSON with fields whose values are raw JSON text (NaN, 1e400, "\\ud800")."""
    text = json.dumps(body)[:-1]
    for name, value in raw_fields.items():
        text += f', "{name}": {value}'
    return text + "}"


async def _post(raw: str, store: Path | None = None) -> dict[str, Any]:
    extra = {"store_url": f"sqlite:///{store}"} if store else {}
    async with api_client(settings(http_tool_allow_hosts=["api.example.com"], **extra)) as c:
        response = await c.post("/runs", content=raw, headers={"content-type": "application/json"})
        error = error_of(response, 422, "validation_error")
        assert (await c.get("/healthz")).status_code == 200
        return error


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e400", "-1e400"])
@pytest.mark.parametrize("setting", ["max_time_s", "llm_retry_delay_s", "max_steps"])
async def test_a_non_finite_setting_is_422(number: str, setting: str) -> None:
    error = await _post(_raw(finishing(), settings=f'{{"{setting}": {number}}}'))

    assert f"settings.{setting}" in error["message"]


@pytest.mark.parametrize(
    ("raw_fields", "where"),
    [
        ({"metadata": '{"a": [1, NaN]}'}, "metadata.a[1]"),
        ({"metadata": '{"a": {"b": Infinity}}'}, "metadata.a.b"),
        (
            {
                "http_tools": json.dumps([{**HTTP_TOOL, "parameters": {"type": "object"}}])[:-3]
                + ', "maximum": NaN}}]'
            },
            "http_tools[0].parameters.maximum",
        ),
    ],
    ids=["metadata-list", "metadata-nested", "http-tool-schema"],
)
async def test_a_non_finite_number_anywhere_in_the_body_is_422_naming_it(
    raw_fields: dict[str, str], where: str
) -> None:
    error = await _post(_raw(finishing(), **raw_fields))

    assert where in error["message"]
    assert error["details"]["errors"][0]["field"] == where


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (_raw(finishing(), metadata='{"note": "a\\ud800b"}'), "metadata.note"),
        (_raw(finishing(), metadata='{"\\udfff": 1}'), "metadata"),
        (_raw(finishing(), system_prompt='"\\ud800"'), "system_prompt"),
        (json.dumps(scripted({"content": "\ud83d"})), "model_script[0].content"),
        (_raw({"model": "scripted", "model_script": []}, task='"x\\udc00"'), "task"),
    ],
    ids=["metadata-value", "metadata-key", "system-prompt", "scripted-reply", "task"],
)
async def test_a_lone_surrogate_is_422_naming_where(body: str, where: str) -> None:
    error = await _post(body)

    assert where in error["message"]
    assert "surrogate" in error["message"]


async def test_an_integer_past_64_bits_in_metadata_is_422(tmp_path: Path) -> None:
    error = await _post(
        _raw(finishing(), metadata='{"n": 99999999999999999999}'), tmp_path / "r.db"
    )

    assert "metadata.n" in error["message"]


@pytest.mark.parametrize("number", ["1e19", "9.3e18", "1e308", "-1e19", "9223372036854775808.0"])
@pytest.mark.parametrize(
    "where",
    [
        "settings.max_total_tokens",
        "settings.max_context_tokens",
        "model_script[0].usage.prompt_tokens",
    ],
)
async def test_an_integer_valued_float_past_64_bits_is_422_naming_the_field(
    tmp_path: Path, number: str, where: str
) -> None:
    """`1e19` is JSON Schema's integer 10**19: taken as such, it was stored, and every read of
    the run (and GET /runs for its key) answered 500 on SQLite and Redis (issue 30)."""
    if where.startswith("settings."):
        raw = _raw(finishing(), settings=f'{{"{where[9:]}": {number}}}')
    else:
        reply = f'{{"usage": {{"prompt_tokens": {number}, "completion_tokens": 1}}}}'
        raw = _raw({"task": "t", "model": "scripted"}, model_script=f"[{reply}]")
    error = await _post(raw, tmp_path / "r.db")

    assert error["details"]["errors"][0]["field"] == where
    assert "64-bit" in error["message"]


async def test_an_integer_valued_float_within_64_bits_is_taken_as_the_integer(
    tmp_path: Path,
) -> None:
    async with api_client(settings(store_url=f"sqlite:///{tmp_path / 'r.db'}")) as client:
        raw = _raw(finishing(), settings='{"max_total_tokens": 9.2e18, "max_steps": 3.0}')
        response = await client.post(
            "/runs", content=raw, headers={"content-type": "application/json"}
        )
        assert response.status_code == 202, response.text

        run = (await client.get(f"/runs/{response.json()['id']}/wait")).json()

        assert run["settings"]["max_total_tokens"] == 9_200_000_000_000_000_000
        assert run["settings"]["max_steps"] == 3


async def test_a_valid_pair_of_surrogates_is_one_character_and_accepted() -> None:
    async with api_client(settings()) as client:
        body = _raw(finishing(), metadata='{"emoji": "\\ud83d\\ude00"}')
        response = await client.post(
            "/runs", content=body, headers={"content-type": "application/json"}
        )

        assert response.status_code == 202, response.text
        assert response.json()["metadata"] == {"emoji": "\U0001f600"}


# -- headers and query ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "headers", "field"),
    [
        ({"after": "99999999999999999999"}, {}, "after"),
        ({"after": "15896057387405279232"}, {}, "after"),
        ({"after": "1000000000000000000"}, {}, "after"),
        ({}, {"Last-Event-ID": "99999999999999999999"}, "Last-Event-ID"),
        ({}, {"Last-Event-ID": "1000000000000000000"}, "Last-Event-ID"),
        ({"limit": "99999999999999999999"}, {}, "limit"),
    ],
)
@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
async def test_an_out_of_range_integer_in_the_query_or_a_header_is_422(
    tmp_path: Path, params: dict[str, str], headers: dict[str, str], field: str, accept: str
) -> None:
    async with api_client(settings(store_url=f"sqlite:///{tmp_path / 'r.db'}")) as client:
        run = (await client.post("/runs", json=finishing())).json()

        response = await client.get(
            f"/runs/{run['id']}/events", params=params, headers={**headers, "Accept": accept}
        )

        error = error_of(response, 422, "validation_error")
        assert field in error["message"]


@pytest.mark.parametrize("value", ["99999999999999999999", "1e400", "inf", "nan", "-1"])
async def test_a_wait_timeout_out_of_range_or_not_finite_is_422(value: str) -> None:
    async with api_client(settings()) as client:
        run = (await client.post("/runs", json=finishing())).json()

        response = await client.get(f"/runs/{run['id']}/wait", params={"timeout_s": value})

        assert "timeout_s" in error_of(response, 422, "validation_error")["message"]


@pytest.mark.parametrize("limit", ["99999999999999999999", "201"])
async def test_a_list_limit_out_of_range_is_422(limit: str) -> None:
    async with api_client(settings()) as client:
        response = await client.get("/runs", params={"limit": limit})

        assert "limit" in error_of(response, 422, "validation_error")["message"]
