"""GET /runs/{id}/events: a JSON page with Accept: application/json, else the SSE stream
(here buffered whole by ASGITransport: live following is tested in tests/e2e)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import anyio
import httpx
import pytest
from sse_starlette import ServerSentEvent

from app.api.routes.events import sse_frames
from app.engine.events import EventType
from app.runs.follow.wiretime import wire_ts
from app.runs.records import Event
from app.runs.stores.events import encode, stored
from tests.api.kit import (
    TERMINAL_EVENTS,
    assert_sequential,
    error_of,
    json_events,
    run_to_end,
    settings,
    sse,
)
from tests.fakes.service import api_client

DEMO = {"task": "What is 2 + 3?", "tools": ["calculator"]}
JSON = {"Accept": "application/json"}
UNKNOWN = "run_00000000000000000000000000"


async def ended_demo_run(client: httpx.AsyncClient) -> tuple[str, int]:
    """A finished run and its event count."""
    run = await run_to_end(client, DEMO)
    page = await json_events(client, run["id"])
    return run["id"], len(page["events"])


async def test_json_page_holds_every_event_in_order_and_says_done() -> None:
    async with api_client(settings()) as client:
        run = await run_to_end(client, DEMO)

        page = await json_events(client, run["id"])

        events = page["events"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[0]["type"] == "run.queued"
        assert events[1]["type"] == "run.started"
        assert events[-1]["type"] == "run.completed"
        assert {"thought", "action", "observation"} <= {e["type"] for e in events}
        for event in events:
            assert event["run_id"] == run["id"]
            assert {"run_id", "seq", "type", "ts", "step"} <= set(event)
        assert events[-1]["result"] == run["result"]
        assert events[-1]["usage"] == run["usage"]
        assert page["next_after"] == len(events)
        assert page["done"] is True


async def test_json_page_after_n_starts_at_n_plus_1() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        page = await json_events(client, run_id, after=3)

        assert [e["seq"] for e in page["events"]] == list(range(4, count + 1))
        assert page["done"] is True


async def test_json_pages_of_limit_walk_the_log_with_next_after() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        seen: list[int] = []
        after = 0
        while True:
            page = await json_events(client, run_id, after=after, limit=2)
            assert len(page["events"]) <= 2
            seen += [e["seq"] for e in page["events"]]
            after = page["next_after"]
            if page["done"]:
                break
            assert page["events"], "a page before the end is never empty"

        assert seen == list(range(1, count + 1))


async def test_json_page_past_the_end_is_empty() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        page = await json_events(client, run_id, after=count)

        assert page == {"events": [], "next_after": count, "done": False}


async def test_json_page_of_a_queued_or_running_run_is_not_done() -> None:
    async with api_client(settings(max_concurrent_runs=1)) as client:
        blocker = await client.post(
            "/runs", json={"task": "x", "model": "scripted", "model_script": [{"delay_s": 600}]}
        )
        queued = (await client.post("/runs", json=DEMO)).json()

        page = await json_events(client, queued["id"])

        assert [e["type"] for e in page["events"]] == ["run.queued"]
        assert page["done"] is False
        for run in (queued, blocker.json()):
            assert (await client.post(f"/runs/{run['id']}/cancel")).status_code == 202


async def test_sse_replays_a_finished_run_then_closes() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        response, events = await sse(client, "GET", f"/runs/{run_id}/events")

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        assert len(events) == count
        assert_sequential(events)
        assert events[-1].event in TERMINAL_EVENTS
        page = await json_events(client, run_id)
        assert [e.data for e in events] == page["events"]


async def test_sse_resumes_after_last_event_id() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        _, events = await sse(
            client, "GET", f"/runs/{run_id}/events", headers={"Last-Event-ID": "4"}
        )

        assert [e.id for e in events] == [str(n) for n in range(5, count + 1)]


async def test_sse_resumes_after_the_after_parameter() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        _, events = await sse(client, "GET", f"/runs/{run_id}/events", params={"after": 6})

        assert [e.id for e in events] == [str(n) for n in range(7, count + 1)]


async def test_last_event_id_wins_over_after_on_reconnection() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        _, events = await sse(
            client,
            "GET",
            f"/runs/{run_id}/events",
            params={"after": 2},
            headers={"Last-Event-ID": str(count - 1)},
        )

        assert [e.id for e in events] == [str(count)]


async def test_sse_after_the_terminal_event_closes_with_no_event() -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        response, events = await sse(
            client, "GET", f"/runs/{run_id}/events", headers={"Last-Event-ID": str(count)}
        )

        assert response.status_code == 200
        assert events == []


async def test_accept_with_both_json_and_event_stream_gets_sse() -> None:
    async with api_client(settings()) as client:
        run_id, _ = await ended_demo_run(client)

        response, events = await sse(
            client,
            "GET",
            f"/runs/{run_id}/events",
            headers={"Accept": "text/event-stream, application/json"},
        )

        assert response.headers["content-type"].startswith("text/event-stream")
        assert events


@pytest.mark.parametrize("value", ["abc", "-1", "1.5", ""])
async def test_invalid_last_event_id_is_422(value: str) -> None:
    async with api_client(settings()) as client:
        run_id, _ = await ended_demo_run(client)

        response = await client.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": value})

        error = error_of(response, 422, "validation_error")
        assert error["details"] == {"field": "Last-Event-ID"}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"after": "-1"}, "after"),
        ({"after": "x"}, "after"),
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
    ],
)
async def test_invalid_after_or_limit_is_422(params: dict[str, Any], field: str) -> None:
    async with api_client(settings()) as client:
        run_id, _ = await ended_demo_run(client)

        response = await client.get(f"/runs/{run_id}/events", params=params, headers=JSON)

        assert error_of(response, 422)["details"]["errors"][0]["field"] == field


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
async def test_events_of_an_unknown_run_are_404(accept: str) -> None:
    async with api_client(settings()) as client:
        response = await client.get(f"/runs/{UNKNOWN}/events", headers={"Accept": accept})

        error_of(response, 404, "not_found")


@pytest.mark.parametrize("past", [1, 1000])
async def test_sse_resumed_past_the_end_of_an_ended_run_closes_with_no_event(past: int) -> None:
    async with api_client(settings()) as client:
        run_id, count = await ended_demo_run(client)

        with anyio.fail_after(5):
            response, events = await sse(
                client, "GET", f"/runs/{run_id}/events", params={"after": count + past}
            )

        assert response.status_code == 200
        assert events == []


def test_sse_frames_of_a_batch_are_the_frames_of_each_event_one_after_the_other() -> None:
    batch = [
        Event("run_1", 1, EventType.RUN_QUEUED, 1.5, 0, {"task": "é\nline\r2"}),
        Event("run_1", 2, EventType.THOUGHT, 2.25, 1, {"text": "a\u2028b"}),
    ]
    one_by_one = b"".join(
        ServerSentEvent(
            # U+2028 as its JSON escape: Python's line readers split on it (LINE_BREAKS)
            data=json.dumps(e.to_dict(), ensure_ascii=False, separators=(",", ":")).replace(
                "\u2028", "\\u2028"
            ),
            event=e.type,
            id=str(e.seq),
        ).encode()
        for e in batch
    )
    assert sse_frames(batch) == one_by_one
    assert sse_frames(batch).count(b"\r\n\r\n") == 2  # one data line each: JSON escapes breaks
    assert len(sse_frames(batch).decode().splitlines()) == 8  # even to str.splitlines


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"text": "plain", "n": 1.5, "big": 10**20, "none": None, "list": [1, "a", {"b": []}]},
        {"text": 'tab\tquote"back\\slash\nline\u000bvt'},  # escaped ASCII: as stored
        {"text": "中文 é \u2028 \x85 😀"},  # non-ASCII: stored escaped, sent as itself
        {"text": "lone \ud800 surrogate"},  # sent as U+FFFD
        {"step": 9, "text": "a payload field named as an envelope field wins, in its place"},
        {"nan": float("nan"), "inf": float("-inf")},
    ],
)
def test_an_events_frame_made_from_the_stored_json_is_the_frame_made_from_its_data(
    data: dict[str, Any],
) -> None:
    """The frame reuses the store's JSON of the payload when it can (issue #42): the bytes are
    the same as encoding the event again."""
    raw = encode(data)
    from_store = stored("run_1", 3, EventType.OBSERVATION, 1733333333.123456, 2, raw)
    assert from_store.raw == raw
    again = Event("run_1", 3, EventType.OBSERVATION, 1733333333.123456, 2, json.loads(raw))
    assert again.raw is None
    assert sse_frames([from_store]) == sse_frames([again])
    (line,) = [x for x in sse_frames([from_store]).decode().split("\r\n") if x.startswith("data")]
    sent = json.loads(line.removeprefix("data: "))
    assert list(sent)[:5] == ["run_id", "seq", "type", "ts", "step"]
    assert sent["seq"] == 3


@pytest.mark.parametrize(
    "ts",
    [
        0.0,
        1.5,
        1733333333.0,
        1733333333.123456,
        1733333333.9994999,
        1733333333.9995,
        1733333333.9999995,  # rounds up into the next second
        1733333333.0004999,
        1733333399.999,
        253402300799.999,  # 9999-12-31T23:59:59.999
        -1.25,
    ],
)
def test_an_events_time_on_the_wire_is_datetimes_iso_form_to_the_millisecond(ts: float) -> None:
    expected = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    assert wire_ts(ts) == expected
    assert wire_ts(ts) == expected  # its second's text remembered


def test_every_millisecond_of_a_second_and_its_edges_read_as_datetime_reads_them() -> None:
    base = 1764806400  # 2025-12-04T00:00:00Z
    for micros in [*range(0, 1_000_000, 997), 999_499, 999_500, 999_999]:
        for ts in (base + micros / 1e6, base + 1 + micros / 1e6):
            assert wire_ts(ts) == datetime.fromtimestamp(ts, UTC).isoformat(
                timespec="milliseconds"
            ), ts


def test_stored_json_with_raw_non_ascii_text_is_encoded_again() -> None:
    """JSON another writer kept with its text as itself (a line break JSON leaves alone, a
    lone surrogate) is not put on the wire as is: the frame escapes and replaces as always."""
    for text in ("a\u2028b", "c\x85d", "lone \ud800"):
        raw = json.dumps({"text": text}, ensure_ascii=False, separators=(",", ":"))
        kept = Event("run_1", 1, EventType.THOUGHT, 1.5, 1, json.loads(raw), raw)
        again = Event("run_1", 1, EventType.THOUGHT, 1.5, 1, json.loads(raw))
        assert sse_frames([kept]) == sse_frames([again])
        assert len(sse_frames([kept]).decode().splitlines()) == 4
