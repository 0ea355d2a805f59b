"""A run whose stored record does not read back (written by hand, or by an earlier version
that let `1e19` through) answers 409 `run_unreadable` on its own endpoints, and only there:
the list leaves it out and names it, every other run reads, lists and runs as before. On the
memory, SQLite and Redis stores alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.events import EventType
from app.runs.records import RunStatus
from app.runs.store import RunStore
from app.settings import Settings
from tests.api.kit import (
    app_with_state,
    cancel,
    create,
    error_of,
    finishing,
    hanging,
    run_to_end,
    settings,
    sse,
    wait_for_status,
)
from tests.runs.raw_records import poisoned, raw_record, write_raw_record

K1 = {"Authorization": "Bearer first-key-5d1c"}
K2 = {"Authorization": "Bearer second-key-9e2f"}


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"


def keyed(store_url: str) -> Settings:
    keys = [K1["Authorization"][7:], K2["Authorization"][7:]]
    return settings(store_url=store_url, api_keys=keys)


async def spoil(store: RunStore, run_id: str) -> None:
    await write_raw_record(store, run_id, poisoned(await raw_record(store, run_id)))


async def test_an_unreadable_run_answers_409_run_unreadable_on_each_of_its_endpoints(
    store_url: str,
) -> None:
    async with app_with_state(keyed(store_url)) as (client, state):
        bad = (await run_to_end(client, finishing(), K1))["id"]
        await spoil(state["manager"].store, bad)

        for method, url, kwargs in [
            ("GET", f"/runs/{bad}", {}),
            ("GET", f"/runs/{bad}/wait", {}),
            ("GET", f"/runs/{bad}/events", {}),
            ("GET", f"/runs/{bad}/events", {"headers": {"Accept": "application/json"}}),
            ("DELETE", f"/runs/{bad}", {}),
            ("POST", f"/runs/{bad}/cancel", {}),
            ("POST", f"/runs/{bad}/messages", {"json": {"content": "hi"}}),
            ("POST", f"/runs/{bad}/stream-token", {}),
        ]:
            headers = {**K1, **kwargs.pop("headers", {})}
            response = await client.request(method, url, headers=headers, **kwargs)

            error = error_of(response, 409, "run_unreadable")
            assert error["details"]["run_id"] == bad, (method, url)
            assert "settings.max_total_tokens" in error["details"]["problem"]
            # another key is told what it is told of any run not its own: there is none
            error_of(await client.request(method, url, headers=K2, **kwargs), 404, "not_found")

        assert (await client.get("/healthz")).status_code == 200


async def test_the_list_leaves_an_unreadable_run_out_and_names_it_once(store_url: str) -> None:
    async with app_with_state(keyed(store_url)) as (client, state):
        ids = [(await run_to_end(client, finishing(), K1))["id"] for _ in range(5)]
        bad = ids[2]
        await spoil(state["manager"].store, bad)
        theirs = await create(client, finishing(), K2)

        whole = (await client.get("/runs", headers=K1)).json()
        assert [r["id"] for r in whole["runs"]] == [i for i in reversed(ids) if i != bad]
        assert whole["unreadable"] == [bad]

        seen, named, cursor = [], [], None
        while True:  # page by page: every readable run once, the unreadable one named once
            params = {"limit": 1, **({"cursor": cursor} if cursor else {})}
            page = (await client.get("/runs", params=params, headers=K1)).json()
            seen += [r["id"] for r in page["runs"]]
            named += page["unreadable"]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [r["id"] for r in whole["runs"]]
        assert named == [bad]

        other = (await client.get("/runs", headers=K2)).json()
        assert [r["id"] for r in other["runs"]] == [theirs["id"]]
        assert other["unreadable"] == []  # not another key's to know of


async def test_other_runs_run_and_read_as_before_beside_an_unreadable_one(
    store_url: str,
) -> None:
    async with app_with_state(keyed(store_url)) as (client, state):
        bad = (await run_to_end(client, finishing(), K1))["id"]
        await spoil(state["manager"].store, bad)

        run = await run_to_end(client, finishing("still here"), K1)

        assert run["result"]["answer"] == "still here"
        events = await client.get(
            f"/runs/{run['id']}/events", headers={**K1, "Accept": "application/json"}
        )
        assert events.json()["done"] is True
        assert (await client.delete(f"/runs/{run['id']}", headers=K1)).status_code == 204


async def test_an_event_holding_a_lone_surrogate_is_served_with_a_replacement_character(
    store_url: str,
) -> None:
    """Not text, so not UTF-8: such an event (from a model's or a tool's output, or a request
    an earlier version let through) made the run's event log answer 500 for good."""
    async with app_with_state(keyed(store_url)) as (client, state):
        run = await create(client, hanging(), K1)
        await wait_for_status(client, run["id"], "running", K1)
        store: RunStore = state["manager"].store
        await store.append(run["id"], EventType.THOUGHT, 1, {"content": "a\ud800b\udfff"})
        await store.append(run["id"], EventType.ACTION, 1, {"arguments": {"\ud800": 1}})
        await cancel(client, run["id"], K1)

        page = await client.get(
            f"/runs/{run['id']}/events", headers={**K1, "Accept": "application/json"}
        )
        response, events = await sse(client, "GET", f"/runs/{run['id']}/events", headers=K1)

        assert page.status_code == 200, page.text
        thoughts = [e for e in page.json()["events"] if e["type"] == "thought"]
        assert [t["content"] for t in thoughts] == ["a\ufffdb\ufffd"]
        actions = [e for e in page.json()["events"] if e["type"] == "action"]
        assert [a["arguments"] for a in actions] == [{"\ufffd": 1}]
        assert response.status_code == 200
        assert [e.data["content"] for e in events if e.event == "thought"] == ["a\ufffdb\ufffd"]
        assert events[-1].event == "run.cancelled"


async def test_start_up_recovery_skips_and_reports_a_run_it_cannot_read(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A crash left two runs `running` on SQLite, one of them unreadable: the service starts,
    fails the other `interrupted` as always, and reports the unreadable one (left for an
    operator: it answers 409 run_unreadable)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with app_with_state(settings(store_url=url)) as (client, state):
        store = state["manager"].store
        left = [(await run_to_end(client, finishing()))["id"] for _ in range(2)]
        for run_id in left:  # as a crash left them: running, nobody executing them
            record = await store.get(run_id)
            record.status, record.result, record.ended_at = RunStatus.RUNNING, None, None
            await store.save(record)
        await spoil(store, left[0])
    capfd.readouterr()

    async with app_with_state(settings(store_url=url)) as (client, _):
        error = error_of(await client.get(f"/runs/{left[0]}"), 409, "run_unreadable")
        assert error["details"]["run_id"] == left[0]
        other = (await client.get(f"/runs/{left[1]}")).json()
        assert (other["status"], other["error"]["type"]) == ("failed", "interrupted")
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line]
    reports = [e for e in lines if e["event"] == "run_not_recovered"]
    assert [e["run_id"] for e in reports] == [left[0]]
    assert "max_total_tokens" in reports[0]["problem"]
