"""No record the service cannot read back (issue 30), as a property: whatever POST /runs, a
decision on a waiting run and a steering message accept, generated over their schemas with
hostile values mixed in (lone surrogates in values and keys, integers and integer-valued
floats at and past 64 bits, NaN, Infinity, subnormals, -0.0), reads back through every read
endpoint: GET /runs/{id}, GET /runs, the events as a JSON page and as SSE, wait, and DELETE
(204, then 404). What is refused is refused with a 4xx and the error body, never a 5xx.

On the memory store, a SQLite file, a real redis-server and a real Postgres, one app each for
the module.
Deterministic (derandomized, no example database) and bounded (a few dozen examples a
store, plus the explicit reproductions of the issue)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any, get_args

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from asgi_lifespan import LifespanManager
from hypothesis import HealthCheck, event, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.engine.declarations import declared
from app.engine.policies import Limits
from app.main import create_app
from tests.api.kit import TERMINAL_EVENTS, TERMINAL_STATUSES, finish, settings
from tests.fakes.postgres_server import PostgresServer
from tests.fakes.redis_server import RedisServer
from tests.fakes.service import read_sse

JSON = {"Content-Type": "application/json"}
PROPERTY = hypothesis_settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
DECISIONS = hypothesis_settings(PROPERTY, max_examples=60)

# -- values: mostly ordinary, with what broke the service mixed in ----------------------------

plain_text = st.text(st.characters(codec="utf-8"), max_size=12)
hostile_text = st.text(
    st.characters(categories=["Cs"]) | st.characters(codec="utf-8"), min_size=1, max_size=6
)
texts = st.one_of(plain_text, plain_text, plain_text, hostile_text)
EDGE_INTEGERS = [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 10**19, 2**53 + 1]
EDGE_FLOATS = [1e19, 9.3e18, 1e308, 2.0**63, -(2.0**63), 9.2e18, 2.0**53, 5e-324, -0.0]
NON_FINITE = [math.nan, math.inf, -math.inf]
numbers = st.one_of(
    st.integers(-1000, 1000),
    st.floats(-1e6, 1e6),
    st.sampled_from(EDGE_INTEGERS + EDGE_FLOATS),
    st.sampled_from(NON_FINITE),
    st.integers(),
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | texts,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=6,
)
counts = st.one_of(
    st.integers(0, 60),
    st.integers(0, 60).map(float),  # JSON Schema's integers: 3.0 is 3
    st.sampled_from(EDGE_INTEGERS + EDGE_FLOATS + NON_FINITE),
)


def _setting_values(kind: Any) -> st.SearchStrategy[Any]:
    base = kind if kind in (int, float, bool) else next(a for a in get_args(kind) if a)
    if base is int or kind == int | None:
        return counts | st.none()
    if base is float:
        return st.floats(0, 3) | st.integers(0, 3) | st.sampled_from(EDGE_FLOATS + NON_FINITE)
    if base is bool:
        return st.booleans() | st.sampled_from([0, 1, None])
    return st.sampled_from([*get_args(kind), "xx"])  # a choice


SETTINGS = {name: _setting_values(item.type) for name, item in declared(Limits).items()}
run_settings = st.lists(st.sampled_from(sorted(SETTINGS)), max_size=3, unique=True).flatmap(
    lambda names: st.fixed_dictionaries({n: SETTINGS[n] for n in names})
)
finish_call = st.fixed_dictionaries(
    {
        "name": st.just("task_finished"),
        "arguments": st.fixed_dictionaries({"answer": texts | json_values}),
    },
    optional={"id": texts},
)
other_call = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["calculator", "no_such_tool"]),
        "arguments": st.dictionaries(texts, json_values, max_size=3) | texts,
    },
    optional={"id": texts},
)
reply = st.fixed_dictionaries(
    {},
    optional={
        "content": st.none() | texts,
        "tool_calls": st.lists(finish_call | other_call, max_size=2),
        "usage": st.fixed_dictionaries({"prompt_tokens": counts, "completion_tokens": counts}),
        "delay_s": st.sampled_from([0, 0.0, 0.001, -1.0]),
    },
)
script = st.tuples(st.lists(reply, max_size=2), st.none() | finish_call).map(
    lambda parts: [*parts[0], *([{"tool_calls": [parts[1]]}] if parts[1] else [])]
)
http_tool = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["lookup", "look up"]),
        "description": texts,
        "url": st.just("https://api.example.com/lookup"),
    },
    optional={
        "headers": st.dictionaries(texts, texts, max_size=2),
        "parameters": st.just({"type": "object"}) | st.dictionaries(texts, json_values, max_size=2),
        "timeout_s": st.floats(0.1, 5) | st.sampled_from(EDGE_FLOATS + NON_FINITE),
    },
)
output_schemas = st.one_of(  # typed answers: valid schemas, and anything else
    st.sampled_from(
        [
            {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
            {"type": "array", "items": {"type": "string"}},
            {"type": ["string", "null"]},
            {},
        ]
    ),
    st.dictionaries(texts, json_values, max_size=2),
)
OPTIONAL_FIELDS = {
    "system_prompt": st.none() | texts,
    "output_schema": output_schemas,
    "metadata": st.dictionaries(texts, json_values, max_size=3),
    "settings": run_settings,
    "http_tools": st.lists(http_tool, max_size=1),
}
CALL = {"name": "calculator", "arguments": {"expression": "6*7"}, "id": "c1"}
plain_runs = st.fixed_dictionaries(
    {"task": texts, "model": st.just("scripted"), "model_script": script},
    optional={**OPTIONAL_FIELDS, "tools": st.just(["calculator"])},
)
waiting_runs = st.fixed_dictionaries(
    {
        "task": texts,
        "model": st.just("scripted"),
        "model_script": st.just([{"tool_calls": [CALL]}, finish("42")]),
        "tools": st.just(["calculator"]),
        "approval": st.just({"tools": ["calculator"]}),
    },
    optional=OPTIONAL_FIELDS,
)
decisions = st.fixed_dictionaries(
    {
        "decisions": st.lists(
            st.fixed_dictionaries(
                {"call_id": st.sampled_from(["c1", "c1", "c1", "c2"]), "approve": st.booleans()},
                optional={
                    "message": st.none() | texts,
                    "arguments": st.none()
                    | st.fixed_dictionaries({"expression": st.just("1+1") | texts})
                    | st.dictionaries(texts, json_values, min_size=1, max_size=2),
                },
            ),
            min_size=1,
            max_size=2,
        )
    }
)
messages = st.fixed_dictionaries({"content": texts})


def raw(body: Any) -> bytes:
    """JSON as a hostile client writes it: NaN and Infinity as literals, a lone surrogate
    as its escape (`ensure_ascii`), integer-valued floats as floats (`1e+19`)."""
    return json.dumps(body, allow_nan=True).encode()


# -- the service, one per store ---------------------------------------------------------------


class Client:
    """An httpx client on the app (lifespan run), called from sync tests through a portal:
    hypothesis drives plain functions."""

    def __init__(self, portal: BlockingPortal, client: httpx.AsyncClient) -> None:
        self.portal = portal
        self.client = client

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.request, method, url, **kwargs))

    def sse(self, url: str) -> tuple[int, list[Any]]:
        async def read() -> tuple[int, list[Any]]:
            async with self.client.stream("GET", url) as response:
                return response.status_code, [e async for e in read_sse(response)]

        return self.portal.call(read)


@pytest.fixture(scope="module", params=["memory", "sqlite", "redis", "postgres"])
def client(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Client]:
    store_url = "memory://"
    if request.param == "sqlite":
        store_url = f"sqlite:///{tmp_path_factory.mktemp('round-trip') / 'runs.db'}"
    elif request.param == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        with server.client() as redis:
            redis.flushdb()
        store_url = server.url()
    elif request.param == "postgres":
        postgres: PostgresServer = request.getfixturevalue("postgres_server")
        store_url = postgres.url(postgres.database())
    app = create_app(
        settings(
            store_url=store_url,
            http_tool_allow_hosts=["api.example.com"],
            max_time_s=2,
            max_time_limit_s=2,
            final_answer_timeout_s=1,
            final_answer_timeout_limit_s=1,
            max_wait_s=10,
            max_queued_runs=1000,
        )
    )

    @asynccontextmanager
    async def served() -> AsyncIterator[httpx.AsyncClient]:
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://round-trip", timeout=30
            ) as http:
                yield http

    with start_blocking_portal() as portal, portal.wrap_async_context_manager(served()) as http:
        yield Client(portal, http)


def answered(response: httpx.Response) -> bool:
    """Accepted (2xx), or refused with a 4xx and the error body; never a 5xx."""
    assert response.status_code < 500, response.text[:1000]
    event(
        f"{response.request.method} {response.request.url.path.split('/')[-1]}: "
        f"{response.status_code}"
    )
    if response.is_success:
        return True
    assert set(response.json()["error"]) == {"type", "message", "details"}, response.text
    return False


def read_back(client: Client, run_id: str, sent: dict[str, Any]) -> None:
    """Every read endpoint answers for the run, and says what was sent."""
    ended = client.request("GET", f"/runs/{run_id}/wait", params={"timeout_s": 10})
    assert ended.status_code == 200, ended.text
    run = ended.json()
    assert run["status"] in TERMINAL_STATUSES, run
    got = client.request("GET", f"/runs/{run_id}")
    assert got.status_code == 200, got.text
    assert got.json() == run
    assert run["task"] == sent["task"]
    assert run["metadata"] == sent.get("metadata", {})
    assert run["system_prompt"] == (sent.get("system_prompt") or None)
    if run["output_schema"] is not None and run["result"] is not None:
        event(f"typed run: {run['result']['reason']}")
        if run["result"]["reason"] in ("finished", "answered"):
            assert json.loads(run["result"]["answer"]) == run["result"]["output"]

    listed = client.request("GET", "/runs", params={"limit": 200})
    assert listed.status_code == 200, listed.text
    assert run_id in [r["id"] for r in listed.json()["runs"]]
    assert listed.json()["unreadable"] == []

    page = client.request(
        "GET",
        f"/runs/{run_id}/events",
        params={"limit": 1000},
        headers={"Accept": "application/json"},
    )
    assert page.status_code == 200, page.text
    events = page.json()["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert page.json()["done"] is True
    status, frames = client.sse(f"/runs/{run_id}/events")
    assert status == 200
    assert [f.data for f in frames] == events
    assert frames[-1].event in TERMINAL_EVENTS

    assert client.request("DELETE", f"/runs/{run_id}").status_code == 204
    assert client.request("GET", f"/runs/{run_id}").status_code == 404


# -- the properties ---------------------------------------------------------------------------

ISSUE = {"task": "t", "model": "scripted", "model_script": [finish("x")]}
WAITING = {
    "task": "t",
    "model": "scripted",
    "tools": ["calculator"],
    "model_script": [{"tool_calls": [CALL]}, finish("42")],
    "approval": {"tools": ["calculator"]},
}
WAITING_ON_ANY_ARGUMENTS = {  # a tool whose schema takes any arguments: only ours check them
    "task": "t",
    "model": "scripted",
    "http_tools": [
        {
            "name": "lookup",
            "description": "Look up.",
            "url": "https://api.example.com/lookup",
            "parameters": {"type": "object"},
            "requires_approval": True,
        }
    ],
    "model_script": [{"tool_calls": [{**CALL, "name": "lookup"}]}, finish("42")],
}


@PROPERTY
@given(body=plain_runs)
@example(body={**ISSUE, "task": "split\u2028by\x85what\x1cline readers\u2029take"})
@example(body={**ISSUE, "settings": {"max_total_tokens": 1e19}})  # issue 30's reproductions
@example(body={**ISSUE, "settings": {"max_context_tokens": 9.3e18}})
@example(body={**ISSUE, "settings": {"max_total_tokens": 1e308}})
@example(body={**ISSUE, "settings": {"max_total_tokens": 9.2e18, "max_steps": 3.0}})
@example(body={**ISSUE, "metadata": {"big": 1e19, "edge": 2**63 - 1, "zero": -0.0}})
@example(
    body={
        **ISSUE,
        "model_script": [{"usage": {"prompt_tokens": 9.2e18, "completion_tokens": 9.2e18}}],
    }
)
def test_every_accepted_run_reads_back_everywhere(client: Client, body: dict[str, Any]) -> None:
    created = client.request("POST", "/runs", content=raw(body), headers=JSON)

    if answered(created):
        assert created.status_code == 202
        read_back(client, created.json()["id"], body)


@DECISIONS
@given(body=waiting_runs, decision=decisions, message=messages)
@example(  # issue 30: a lone surrogate in an edited argument's key, then one in its value
    body=WAITING_ON_ANY_ARGUMENTS,
    decision={"decisions": [{"call_id": "c1", "approve": True, "arguments": {"\udfff": 1}}]},
    message={"content": "x\ud800"},
)
@example(
    body=WAITING,
    decision={
        "decisions": [{"call_id": "c1", "approve": True, "arguments": {"expression": "1\ud800"}}]
    },
    message={"content": "steer"},
)
@example(
    body=WAITING_ON_ANY_ARGUMENTS,
    decision={"decisions": [{"call_id": "c1", "approve": True, "arguments": {"n": 1e400}}]},
    message={"content": "steer"},
)
@example(
    body=WAITING,
    decision={"decisions": [{"call_id": "c1", "approve": True, "arguments": {"expression": "2"}}]},
    message={"content": "x"},
)
def test_every_accepted_decision_and_message_reads_back_everywhere(
    client: Client, body: dict[str, Any], decision: dict[str, Any], message: dict[str, Any]
) -> None:
    created = client.request("POST", "/runs", content=raw(body), headers=JSON)
    if not answered(created):
        return
    run_id = created.json()["id"]
    waiting = client.request("GET", f"/runs/{run_id}/wait", params={"timeout_s": 10}).json()
    if waiting["status"] == "requires_action":
        url = f"/runs/{run_id}"
        answered(client.request("POST", f"{url}/messages", content=raw(message), headers=JSON))
        if not answered(
            client.request("POST", f"{url}/approvals", content=raw(decision), headers=JSON)
        ):
            reject = {"decisions": [{"call_id": "c1", "approve": False}]}  # no tool runs
            assert client.request("POST", f"{url}/approvals", json=reject).status_code == 202

    read_back(client, run_id, body)
