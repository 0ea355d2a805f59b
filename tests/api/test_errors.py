"""Errors the framework raises (no route, wrong method) keep the service's error body."""

from __future__ import annotations

import pytest

from tests.api.kit import error_of, settings
from tests.fakes.service import api_client


@pytest.mark.parametrize("path", ["/nope", "/runs/abc/nope", "/static/nope.js"])
async def test_unknown_route_is_404_with_the_json_error_body(path: str) -> None:
    async with api_client(settings()) as client:
        error = error_of(await client.get(path), 404, "not_found")
        assert error["message"]


async def test_unknown_route_message_names_method_and_path() -> None:
    async with api_client(settings()) as client:
        error = error_of(await client.get("/nope"), 404, "not_found")
        assert error["message"] == "no route GET /nope"


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("PUT", "/runs", {"GET", "POST"}),
        ("DELETE", "/runs", {"GET", "POST"}),
        ("PATCH", "/runs/run_00000000000000000000000000", {"GET", "DELETE"}),
        ("GET", "/runs/run_00000000000000000000000000/cancel", {"POST"}),
        ("POST", "/healthz", {"GET"}),
    ],
)
async def test_wrong_method_is_405_with_the_json_error_body_and_allow(
    method: str, path: str, allowed: set[str]
) -> None:
    async with api_client(settings()) as client:
        response = await client.request(method, path)

        error_of(response, 405, "method_not_allowed")
        assert {m.strip() for m in response.headers["allow"].split(",")} >= allowed


async def test_openapi_schema_is_served() -> None:
    async with api_client(settings()) as client:
        schema = (await client.get("/openapi.json")).json()
        assert {"/runs", "/runs/{run_id}", "/runs/{run_id}/events", "/tools"} <= set(
            schema["paths"]
        )
