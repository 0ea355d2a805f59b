"""What a JSON-RPC request must be before the SDK's dispatcher reads it (`app.api.a2a.intake`):
nested at most 48 levels (InvalidRequest naming the nesting, as POST /runs and /ag-ui refuse
theirs), and JSON if its Content-Type says anything (ContentTypeNotSupported otherwise); and a
client's malformed request (not JSON, wrong types, an unknown method) is answered with its
JSON-RPC error and logged without a traceback: the client's doing.

The malformed requests are written by hand: the SDK's client cannot send them."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from a2a.utils.errors import InvalidRequestError
from structlog.testing import capture_logs

from app.api.a2a.intake import MAX_NESTING
from tests.a2a.kit import A2AService, a2a_service, finish, request, scripted, state_name, text

pytestmark = pytest.mark.e2e


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def sdk_records() -> Iterator[list[logging.LogRecord]]:
    """What the SDK logs (its stdlib loggers, `a2a.*`) meanwhile."""
    kept, logger = Kept(), logging.getLogger("a2a")
    logger.addHandler(kept)
    try:
        yield kept.records
    finally:
        logger.removeHandler(kept)


def nested(levels: int) -> Any:
    """A value of `levels` nested arrays."""
    value: Any = []
    for _ in range(levels - 1):
        value = [value]
    return value


async def rpc(service: A2AService, body: bytes) -> dict[str, Any]:
    answer = await service.http.post(
        service.url("/a2a/calc"), content=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 200, answer.text
    reply: dict[str, Any] = answer.json()
    return reply


def metadata(error: dict[str, Any]) -> dict[str, Any]:
    """The facts of an A2A error: the ErrorInfo's metadata."""
    (info,) = error["data"]
    found: dict[str, Any] = info["metadata"]
    return found


def deep_request(levels: int) -> bytes:
    """A SendMessage whose metadata nests so deep that the whole request has `levels` levels."""
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
            "metadata": {"deep": nested(levels - 3)},
        },
    }
    return json.dumps(body).encode()


async def test_a_request_nested_3000_deep_is_an_invalid_request_naming_the_nesting() -> None:
    deep = "[" * 3000 + "]" * 3000
    body = '{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": %s}}'
    async with a2a_service() as service:
        with sdk_records() as records, capture_logs() as logs:
            unparsable = await rpc(service, (body % deep).encode())
            parsable = await rpc(service, deep_request(60))

    assert unparsable["error"]["code"] == -32600  # InvalidRequest, not InternalError
    assert "nests objects and arrays too deep to parse" in unparsable["error"]["message"]
    assert f"at most {MAX_NESTING} levels" in unparsable["error"]["message"]
    assert metadata(unparsable["error"]) == {
        "type": "validation_error",
        "field": "body",
        "cap": MAX_NESTING,
    }
    assert parsable["id"] == 7
    assert parsable["error"]["code"] == -32600
    assert "nests objects and arrays 60 levels deep" in parsable["error"]["message"]
    assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert not [e for e in logs if "exc_info" in e or e["log_level"] in ("error", "critical")]


async def test_a_request_nested_to_the_bound_is_read_one_level_more_is_refused() -> None:
    async with a2a_service() as service:
        client = await service.client("calc", streaming=False)
        sent = request(text("2+3?"), finishline=scripted(finish("5")))
        sent.metadata.update({"deep": nested(MAX_NESTING - 3)})  # body, params, metadata
        done = await send_request(client, sent)
        sent = request(text("2+3?"), finishline=scripted(finish("5")))
        sent.metadata.update({"deep": nested(MAX_NESTING - 2)})
        with pytest.raises(InvalidRequestError, match=f"{MAX_NESTING + 1} levels deep"):
            await send_request(client, sent)
    assert state_name(done.status.state) == "TASK_STATE_COMPLETED"


async def send_request(client: Any, sent: Any) -> Any:
    responses = [r async for r in client.send_message(sent)]
    (only,) = responses
    return only.task


BAD = [
    pytest.param(b"not json", -32700, id="not-json"),
    pytest.param(b"[]", -32600, id="empty-array"),
    pytest.param(b'[{"jsonrpc": "2.0", "id": 1, "method": "GetTask"}]', -32600, id="batch"),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": "Nope", "params": {}}', -32601, id="method"
    ),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": 5}}', -32602, id="type"
    ),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": [1]}', -32602, id="params"
    ),
    pytest.param(
        b'{"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": 5}}',
        -32600,
        id="v0.3-type",
    ),
]


@pytest.mark.parametrize(("body", "code"), BAD)
async def test_a_malformed_request_is_answered_and_logged_without_a_traceback(
    body: bytes, code: int
) -> None:
    async with a2a_service() as service:
        with sdk_records() as records, capture_logs() as logs:
            answer = await rpc(service, body)

    assert answer["error"]["code"] == code
    assert records, "the SDK says what it refused"
    assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert all(r.levelno == logging.WARNING for r in records)
    assert not [e for e in logs if "exc_info" in e or e["log_level"] in ("error", "critical")]


@pytest.mark.parametrize(
    ("content_type", "code"),
    [
        ("text/plain", -32005),
        ("application/x-www-form-urlencoded", -32005),
        ("application/json; charset=utf-8", -32601),
        ("application/json-rpc", -32601),
        (None, -32601),  # says nothing: read as JSON
    ],
)
async def test_a_body_declared_as_anything_but_json_is_content_type_not_supported(
    content_type: str | None, code: int
) -> None:
    body = b'{"jsonrpc": "2.0", "id": 3, "method": "Nope", "params": {}}'
    headers = {"Content-Type": content_type} if content_type else {}
    async with a2a_service() as service:
        answer = await service.http.post(service.url("/a2a/calc"), content=body, headers=headers)
    error = answer.json()["error"]
    assert error["code"] == code  # ContentTypeNotSupported; else the method is not found
    if code == -32005:
        assert error["message"] == (
            f"Content-Type {content_type}: A2A's JSON-RPC requests are application/json"
        )
