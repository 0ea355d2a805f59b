"""What the sub-agent tests share (DESIGN §15): a parent's calls of its agents, scripted
workers, and reads of a run's children and events.

    body = scripted(calling("calc", "2+2"), finish("4"), agents={"calc": worker(finish("4"))})
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx

from tests.api.kit import json_events


def calling(*calls: tuple[str, str], content: str | None = None) -> dict[str, Any]:
    """A scripted reply that calls agents: (name, task) each, in one step."""
    reply: dict[str, Any] = {
        "tool_calls": [{"name": name, "arguments": {"task": task}} for name, task in calls]
    }
    if content is not None:
        reply["content"] = content
    return reply


def call(name: str, task: str) -> dict[str, Any]:
    """A scripted reply with one call of agent `name`."""
    return calling((name, task))


def worker(*replies: dict[str, Any], description: str = "A worker.", **fields: Any) -> dict:
    """A sub-agent on the scripted model."""
    return {
        "description": description,
        "model": "scripted",
        "model_script": list(replies),
        **fields,
    }


async def children(client: httpx.AsyncClient, run_id: str, **headers: str) -> list[dict[str, Any]]:
    """The run's child runs, oldest first."""
    response = await client.get("/runs", params={"parent_run_id": run_id}, headers=headers)
    assert response.status_code == 200, response.text
    return list(reversed(response.json()["runs"]))


async def started_children(
    client: httpx.AsyncClient, run_id: str, count: int = 1
) -> list[dict[str, Any]]:
    """The run's first `count` children, once it has started them (read until it has)."""
    with anyio.fail_after(10):
        while True:
            found = await children(client, run_id)
            if len(found) >= count:
                return found
            await anyio.sleep(0.01)


async def events(client: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    return list((await json_events(client, run_id))["events"])


def of_type(found: list[dict[str, Any]], *types: str) -> list[dict[str, Any]]:
    return [e for e in found if e["type"] in types]
