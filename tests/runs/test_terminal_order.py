"""DESIGN §5: a run's record is terminal before its terminal event is emitted, so a client
that saw the event and then reads the run sees it ended."""

from __future__ import annotations

from typing import Any

import pytest

import app.main
from app.engine.events import TERMINAL_EVENT_TYPES
from app.runs.stores.memory import MemoryRunStore
from tests.fakes.service import api_client, service_settings

FINISH = {"tool_calls": [{"name": "task_finished", "arguments": {"answer": "a"}}]}
HANG = {"content": "thinking", "delay_s": 600}


class CheckingStore(MemoryRunStore):
    """Records, at each terminal append, whether the stored record had already ended."""

    def __init__(self) -> None:
        super().__init__()
        self.terminal_appends: list[tuple[str, str, bool]] = []

    async def append(
        self, run_id: str, type: Any, step: int, data: dict[str, Any], *, record: Any = None
    ) -> Any:
        if type in TERMINAL_EVENT_TYPES:  # a record given is saved first, in the same write
            stored = record if record is not None else await self.get(run_id)
            ended = stored is not None and stored.status.terminal
            self.terminal_appends.append((run_id, type, ended))
        return await super().append(run_id, type, step, data, record=record)


async def test_every_terminal_event_follows_a_terminal_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = CheckingStore()
    monkeypatch.setattr(app.main, "open_store", lambda url, **_: store)
    scripts = {
        "completed": [FINISH],
        "incomplete": [{"content": "no tools"}] * 2,  # max_nudges 0: nudge_limit
        "failed": [],  # the script runs out at once
    }
    async with api_client(service_settings(max_concurrent_runs=1)) as client:
        ids = []
        for script in scripts.values():
            body = {
                "task": "t",
                "model": "scripted",
                "model_script": script,
                "settings": {"max_nudges": 0},
            }
            ids.append((await client.post("/runs", json=body)).json()["id"])
            await client.get(f"/runs/{ids[-1]}/wait", params={"timeout_s": 5})
        running = (
            await client.post(
                "/runs", json={"task": "t", "model": "scripted", "model_script": [HANG]}
            )
        ).json()
        queued = (
            await client.post(
                "/runs", json={"task": "t", "model": "scripted", "model_script": [FINISH]}
            )
        ).json()
        await client.post(f"/runs/{queued['id']}/cancel")
        await client.post(f"/runs/{running['id']}/cancel")
        statuses = [
            (await client.get(f"/runs/{i}")).json()["status"]
            for i in [*ids, running["id"], queued["id"]]
        ]
    assert statuses == ["completed", "incomplete", "failed", "cancelled", "cancelled"]
    assert len(store.terminal_appends) == 5
    assert all(ended for _, _, ended in store.terminal_appends), store.terminal_appends
