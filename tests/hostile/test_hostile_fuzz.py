"""Hostile input over every endpoint, generated: whatever a client sends in the body, the
headers, the path or the query (non-finite numbers, integers past 64 bits, lone surrogates,
deep nesting, huge strings, raw bytes), the answer is a 4xx with the error body, or a
success; never a 5xx; and the server still answers /healthz at once afterwards.

Deterministic (derandomized, no example database) and bounded: a few hundred examples in
all, against one app on a real SQLite file (so 64-bit limits are SQLite's own)."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from asgi_lifespan import LifespanManager
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.main import create_app
from tests.api.kit import finish, finishing, scripted, settings

KEY = "fuzz-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
HEALTHZ_BOUND_S = 1.0
"""Generous for a shared CI machine: /healthz takes a few ms; the unfixed service, busy
validating 10,000 tools, took 6 s."""

FUZZ = hypothesis_settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

# -- hostile JSON -----------------------------------------------------------------------------

NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400"]
HUGE_INTS = ["99999999999999999999", "-9223372036854775809", "9223372036854775808", "9" * 5000]


def _deep(depth: int, opener: str) -> str:
    closer = "]" if opener == "[" else "}"
    inner = '{"a": ' if opener == "{" else "["
    return inner * depth + "1" + closer * depth


texts = st.text(
    alphabet=st.characters(categories=["Cs"]) | st.characters(codec="utf-8"), max_size=12
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    texts,
)
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(texts, children, max_size=3),
    max_leaves=8,
)
HOSTILE_RAW = [
    *NON_FINITE,
    *HUGE_INTS,
    '"\\ud800"',
    '"a\\udfffb"',
    '{"k": NaN}',
    '{"\\ud800": 1}',
    "[1, Infinity]",
    '{"type": "object", "maximum": NaN}',
]
raw_json = st.one_of(
    st.sampled_from(HOSTILE_RAW),  # first: the values that broke the service, most often
    values.map(lambda v: json.dumps(v, allow_nan=True)),  # ensure_ascii: surrogates as \\udXXX
    st.sampled_from([10_000, 300_000, 2_000_000]).map(lambda n: json.dumps("x" * n)),
    st.tuples(st.sampled_from([40, 500, 5000]), st.sampled_from("[{")).map(lambda a: _deep(*a)),
)

PLACES = [
    "task",
    "system_prompt",
    "model",
    "tools",
    "http_tools",
    "metadata",
    "settings",
    "model_script",
    "webhook",
    "stream",
    "on_disconnect",
    "settings.max_time_s",
    "settings.max_steps",
    "settings.llm_retry_delay_s",
    "settings.max_total_tokens",
    "metadata.note",
    "http_tools[0].parameters",
    "http_tools[0].timeout_s",
    "http_tools[0].headers",
    "model_script[0].content",
    "model_script[0].delay_s",
    "model_script[0].usage",
    "model_script[0].tool_calls[0].arguments",
]


def _base() -> dict[str, Any]:
    return scripted(
        finish(),
        settings={"max_steps": 3},
        metadata={"note": "n"},
        http_tools=[
            {
                "name": "lookup",
                "description": "Look up.",
                "url": "https://api.example.com/lookup",
                "parameters": {"type": "object"},
                "headers": {"X": "y"},
            }
        ],
    )


def body_with(place: str, raw: str) -> str:
    """The base body with `raw` JSON text at `place`."""
    body: Any = _base()
    body["model_script"][0]["usage"] = {"prompt_tokens": 1, "completion_tokens": 1}
    body["model_script"][0]["content"] = "c"
    body["model_script"][0]["delay_s"] = 0
    body["http_tools"][0]["timeout_s"] = 1
    target, steps = body, place.replace("[0]", ".0").split(".")
    for step in steps[:-1]:
        target = target[int(step)] if step.isdigit() else target[step]
    target[steps[-1]] = "__HOSTILE__"
    return json.dumps(body).replace('"__HOSTILE__"', raw)


# -- hostile headers, paths and query values --------------------------------------------------

header_values = st.one_of(
    st.sampled_from([b"", b" ", b"99999999999999999999", b"-1", b"1e400", b"NaN", b"9" * 5000]),
    st.integers(min_value=10**18 - 2, max_value=2**64 + 2).map(lambda n: str(n).encode()),
    st.binary(max_size=40).map(lambda b: bytes(c for c in b if c not in b"\r\n\x00")),
    texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
)
query_values = st.one_of(
    st.sampled_from(NON_FINITE + HUGE_INTS + ["inf", "nan", "-1", "", "4.4e16", "0x10"]),
    st.integers(min_value=10**18 - 2, max_value=2**64 + 2).map(str),
    texts,
    st.integers().map(str),
)
path_values = st.one_of(
    texts.map(lambda t: quote(t.encode("utf-8", "surrogatepass"), safe="")),
    st.sampled_from(["run_" + "0" * 26, "run_" + "Z" * 26, "..", "%00", "x" * 5000, "%ff%fe"]),
)


# -- the app and the checks -------------------------------------------------------------------


class Client:
    """An httpx client on the app (lifespan run), called from sync tests through a portal:
    hypothesis drives plain functions."""

    def __init__(self, portal: BlockingPortal, client: httpx.AsyncClient) -> None:
        self.portal = portal
        self.client = client

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.portal.call(functools.partial(self.client.request, method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    store = tmp_path_factory.mktemp("fuzz") / "runs.db"
    app = create_app(
        settings(
            store_url=f"sqlite:///{store}",
            api_keys=[KEY],
            http_tool_allow_hosts=["api.example.com"],
            max_time_s=1,
            max_time_limit_s=1,
            final_answer_timeout_s=0.5,
            final_answer_timeout_limit_s=0.5,
            max_wait_s=0.5,
            max_queued_runs=1000,
        )
    )

    @asynccontextmanager
    async def served() -> AsyncIterator[httpx.AsyncClient]:
        async with LifespanManager(app) as manager:
            transport = httpx.ASGITransport(app=manager.app, raise_app_exceptions=False)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://fuzz", timeout=30
            ) as http:
                yield http

    with (
        start_blocking_portal() as portal,
        portal.wrap_async_context_manager(served()) as http,
    ):
        yield Client(portal, http)


@pytest.fixture(scope="module")
def run_id(client: Client) -> str:
    created = client.post("/runs", json=finishing(), headers=AUTH)
    assert created.status_code == 202, created.text
    ended = client.get(f"/runs/{created.json()['id']}/wait", headers=AUTH)
    assert ended.json()["status"] == "completed"
    return str(ended.json()["id"])


def assert_answered(client: Client, response: Any) -> None:
    """Success, or a 4xx with the error body; never a 5xx; then /healthz at once."""
    assert response.status_code < 500, response.text[:500]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"type", "message", "details"}, error
        assert error["message"]
    started = time.perf_counter()
    assert client.get("/healthz").status_code == 200
    assert time.perf_counter() - started < HEALTHZ_BOUND_S


# -- the properties ---------------------------------------------------------------------------


@FUZZ
@given(place=st.sampled_from(PLACES), raw=raw_json)
@example(place="settings.max_time_s", raw="Infinity")  # the reproductions of issue 15
@example(place="settings.llm_retry_delay_s", raw="1e400")
@example(place="metadata.note", raw='"\\ud800"')
@example(place="system_prompt", raw='"\\ud800"')
@example(place="model_script[0].content", raw='"\\ud800"')
@example(place="http_tools[0].parameters", raw='{"type": "object", "maximum": NaN}')
def test_post_runs_with_a_hostile_value_anywhere_in_the_body(
    client: Client, place: str, raw: str
) -> None:
    response = client.post(
        "/runs",
        content=body_with(place, raw).encode("utf-8", "surrogatepass"),
        headers={**AUTH, "Content-Type": "application/json"},
    )

    assert_answered(client, response)


@FUZZ
@given(raw=raw_json)
def test_post_runs_with_a_hostile_whole_body(client: Client, raw: str) -> None:
    response = client.post(
        "/runs",
        content=raw.encode("utf-8", "surrogatepass"),
        headers={**AUTH, "Content-Type": "application/json"},
    )

    assert_answered(client, response)


@FUZZ
@given(
    name=st.sampled_from(["Authorization", "Idempotency-Key", "Content-Type", "Last-Event-ID"]),
    value=header_values,
)
@example(name="Last-Event-ID", value=b"99999999999999999999")
@example(name="Last-Event-ID", value=b"")
def test_hostile_headers(client: Client, run_id: str, name: str, value: bytes) -> None:
    headers = {"Authorization": f"Bearer {KEY}".encode(), name.encode(): value}
    for method, url, body in [
        ("POST", "/runs", json.dumps(finishing()).encode()),
        ("GET", f"/runs/{run_id}/events", None),
    ]:
        raw = list(headers.items())
        if body is not None and name != "Content-Type":
            raw.append((b"Content-Type", b"application/json"))
        response = client.request(method, url, content=body, headers=raw)

        assert_answered(client, response)


@FUZZ
@given(
    route=st.sampled_from(
        [
            ("GET", "/runs", "status"),
            ("GET", "/runs", "limit"),
            ("GET", "/runs", "cursor"),
            ("GET", "/runs/{id}/events", "after"),
            ("GET", "/runs/{id}/events", "limit"),
            ("GET", "/runs/{id}/events", "token"),
            ("GET", "/runs/{id}/wait", "timeout_s"),
            ("GET", "/settings", "x"),
        ]
    ),
    value=query_values,
    accept=st.sampled_from(["application/json", "text/event-stream", "*/*"]),
)
@example(route=("GET", "/runs/{id}/events", "after"), value="99999999999999999999", accept="*/*")
@example(
    route=("GET", "/runs/{id}/events", "after"),
    value="15896057387405279232",
    accept="application/json",
)
@example(route=("GET", "/runs/{id}/wait", "timeout_s"), value="4.4e16", accept="*/*")
@example(route=("GET", "/runs", "status"), value="a", accept="*/*")
def test_hostile_query_values(
    client: Client, run_id: str, route: tuple[str, str, str], value: str, accept: str
) -> None:
    method, path, name = route
    encoded = quote(value.encode("utf-8", "surrogatepass"), safe="")
    response = client.request(
        method,
        f"{path.replace('{id}', run_id)}?{name}={encoded}",
        headers={**AUTH, "Accept": accept},
    )

    assert_answered(client, response)


@FUZZ
@given(
    route=st.sampled_from(
        [
            ("GET", "/runs/{}"),
            ("GET", "/runs/{}/events"),
            ("GET", "/runs/{}/wait"),
            ("POST", "/runs/{}/cancel"),
            ("POST", "/runs/{}/stream-token"),
            ("DELETE", "/runs/{}"),
        ]
    ),
    segment=path_values,
)
def test_hostile_paths(client: Client, route: tuple[str, str], segment: str) -> None:
    method, template = route

    response = client.request(method, template.format(segment), headers=AUTH)

    assert_answered(client, response)
