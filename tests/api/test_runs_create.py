"""POST /runs: 202 and the run, idempotent replays, the stream, and the refusals of load and
shutdown (a request's own faults: test_runs_refusals.py, test_runs_settings.py)."""

from __future__ import annotations

import anyio
import httpx

from app.offload import HEAVY
from tests.api.kit import (
    TERMINAL_EVENTS,
    app_with_state,
    assert_sequential,
    cancel,
    create,
    error_of,
    finishing,
    hanging,
    scripted,
    settings,
    sse,
    wait_ended,
)
from tests.fakes.llm_server import FakeLLMServer, FakeReply
from tests.fakes.service import api_client

# -- accepted ---------------------------------------------------------------------------------


async def test_create_answers_202_with_the_queued_run_its_links_and_content_location() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json=finishing("42", metadata={"ticket": 7}))

        assert response.status_code == 202
        run = response.json()
        assert run["id"].startswith("run_")
        assert run["status"] == "queued"
        assert run["links"] == {
            "self": f"/runs/{run['id']}",
            "events": f"/runs/{run['id']}/events",
            "cancel": f"/runs/{run['id']}/cancel",
        }
        assert response.headers["content-location"] == f"/runs/{run['id']}"
        assert run["metadata"] == {"ticket": 7}
        assert run["model"] == "scripted"
        assert run["result"] is None
        assert (await wait_ended(client, run["id"]))["result"]["answer"] == "42"


async def test_demo_model_is_the_default_without_an_endpoint_and_finishes() -> None:
    async with api_client(settings()) as client:
        run = await create(client, {"task": "What is 6 * 7?", "tools": ["calculator"]})
        assert run["model"] == "demo"

        ended = await wait_ended(client, run["id"])

        assert ended["status"] == "completed"
        assert ended["result"]["reason"] == "finished"
        assert "demo model" in ended["result"]["answer"]


async def test_endpoint_model_runs_against_the_configured_llm_base_url() -> None:
    async with FakeLLMServer([FakeReply.finish("from the endpoint")]) as llm:
        app_settings = settings(llm_base_url=llm.base_url, llm_model="fake-model")
        async with api_client(app_settings) as client:
            run = await create(client, {"task": "ask the endpoint"})
            assert run["model"] == "fake-model"

            ended = await wait_ended(client, run["id"])

        assert ended["result"] == {
            "answer": "from the endpoint",
            "reason": "finished",
            "degraded": False,
        }
        assert llm.requests[0]["model"] == "fake-model"


async def test_value_at_the_cap_is_accepted() -> None:
    async with api_client(settings(max_steps_limit=5, max_steps=5)) as client:
        run = await create(client, finishing(settings={"max_steps": 5}))
        assert run["settings"]["max_steps"] == 5


async def test_a_small_run_is_created_without_waiting_for_the_busy_worker_thread() -> None:
    """A body of at most 16 KiB without HTTP tools is parsed, hashed and checked on the loop:
    POST /runs does not queue behind the one worker thread (app.offload) for it."""
    async with api_client(settings()) as client:
        async with HEAVY:  # the worker thread's one slot, taken for the whole request
            with anyio.fail_after(10):
                run = await create(client, finishing("42"))

        assert run["status"] == "queued"


# -- idempotency ------------------------------------------------------------------------------


async def test_idempotent_replay_answers_200_with_the_same_run() -> None:
    async with api_client(settings()) as client:
        key = {"Idempotency-Key": "order-17"}
        first = await client.post("/runs", json=finishing("once"), headers=key)
        assert first.status_code == 202
        await wait_ended(client, first.json()["id"])

        replay = await client.post("/runs", json=finishing("once"), headers=key)

        assert replay.status_code == 200
        assert replay.json()["id"] == first.json()["id"]
        assert replay.json()["status"] == "completed"
        assert replay.headers["content-location"] == f"/runs/{first.json()['id']}"
        listed = (await client.get("/runs")).json()["runs"]
        assert [r["id"] for r in listed] == [first.json()["id"]]


async def test_same_idempotency_key_with_another_body_is_409() -> None:
    async with api_client(settings()) as client:
        key = {"Idempotency-Key": "order-17"}
        first = await create(client, finishing("once"), headers=key)

        response = await client.post("/runs", json=finishing("twice"), headers=key)

        error = error_of(response, 409, "idempotency_conflict")
        assert error["details"]["run_id"] == first["id"]


async def test_idempotency_holds_for_bodies_hashed_off_the_loop() -> None:
    """A body over 16 KiB is parsed and hashed in a worker thread, a small one on the loop:
    the replay and the conflict are the same either way."""
    big = {"system_prompt": "x" * 20_000}
    async with api_client(settings()) as client:
        key = {"Idempotency-Key": "order-19"}
        first = await create(client, finishing("once", **big), headers=key)

        replay = await client.post("/runs", json=finishing("once", **big), headers=key)
        other = await client.post("/runs", json=finishing("twice", **big), headers=key)
        small = await client.post("/runs", json=finishing("once"), headers=key)

        assert replay.status_code == 200
        assert replay.json()["id"] == first["id"]
        assert error_of(other, 409, "idempotency_conflict")["details"]["run_id"] == first["id"]
        assert error_of(small, 409, "idempotency_conflict")["details"]["run_id"] == first["id"]


async def test_concurrent_requests_with_one_idempotency_key_make_one_run() -> None:
    async with api_client(settings()) as client:
        key = {"Idempotency-Key": "order-18"}
        responses: list[httpx.Response] = []

        async def post() -> None:
            responses.append(await client.post("/runs", json=finishing(), headers=key))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tasks:
                for _ in range(5):
                    tasks.start_soon(post)

        assert sorted(r.status_code for r in responses) == [200, 200, 200, 200, 202]
        assert len({r.json()["id"] for r in responses}) == 1
        assert len((await client.get("/runs")).json()["runs"]) == 1


async def test_idempotency_key_over_200_chars_is_422() -> None:
    async with api_client(settings()) as client:
        response = await client.post(
            "/runs", json=finishing(), headers={"Idempotency-Key": "k" * 201}
        )
        assert "idempotency-key" in error_of(response, 422, "validation_error")["message"]


# -- stream: true -----------------------------------------------------------------------------


async def test_stream_true_answers_200_with_the_runs_whole_event_stream() -> None:
    async with api_client(settings()) as client:
        body = {"task": "What is 2 + 3?", "tools": ["calculator"], "stream": True}

        response, events = await sse(client, "POST", "/runs", json=body)

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert_sequential(events)
        assert events[0].event == "run.queued"
        assert events[1].event == "run.started"
        assert events[-1].event == "run.completed"
        run_id = events[0].data["run_id"]
        assert response.headers["content-location"] == f"/runs/{run_id}"
        run = (await client.get(f"/runs/{run_id}")).json()
        assert run["status"] == "completed"
        assert events[-1].data["result"] == run["result"]


async def test_stream_true_ends_with_the_terminal_event_of_a_failed_run() -> None:
    async with api_client(settings()) as client:
        body = scripted({"content": "no finish"}, settings={"max_steps": 3}, stream=True)

        response, events = await sse(client, "POST", "/runs", json=body)

        assert response.status_code == 200
        assert_sequential(events)
        assert events[-1].event in TERMINAL_EVENTS
        assert events[-1].data["error"]["type"] == "script_exhausted"


async def test_refused_stream_request_is_a_json_error_not_a_stream() -> None:
    async with api_client(settings()) as client:
        response = await client.post("/runs", json={"task": "x", "model": "nope", "stream": True})
        error_of(response, 422)


# -- refused: load and shutdown ---------------------------------------------------------------


async def test_third_run_is_429_with_retry_after_when_slot_and_queue_are_full() -> None:
    async with api_client(settings(max_concurrent_runs=1, max_queued_runs=1)) as client:
        running = await create(client, hanging())
        queued = await create(client, hanging())

        response = await client.post("/runs", json=finishing())

        error = error_of(response, 429, "queue_full")
        assert int(response.headers["retry-after"]) > 0
        assert error["details"]["retry_after_s"] == int(response.headers["retry-after"])
        await cancel(client, queued["id"])
        await cancel(client, running["id"])
        assert (await client.post("/runs", json=finishing())).status_code == 202


async def test_create_is_503_while_the_server_drains() -> None:
    async with app_with_state(settings()) as (client, state):
        state["manager"].begin_drain(0)

        response = await client.post("/runs", json=finishing())

        error_of(response, 503, "shutting_down")
