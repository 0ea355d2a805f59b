"""Schedules under test: the real app (its manager, store and run-body reader), with
schedulers of the test's own on a clock the test moves (no test waits for a due time)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgi_lifespan import LifespanManager

from app.api.schedule_runs import schedule_run_reader
from app.main import create_app
from app.runs.schedules.scheduler import SchedulerOptions
from app.runs.schedules.service import Schedules
from app.settings import Settings

FUTURE = datetime(2031, 1, 6, 8, 59, 30, tzinfo=UTC).timestamp()
"""Where test clocks start: past any real time, so the app's own scheduler (on the real
clock) never finds the test's schedules due."""


class FakeClock:
    def __init__(self, now: float = FUTURE) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def at(self, iso: str) -> None:
        self.now = datetime.fromisoformat(iso).timestamp()


@dataclass
class Replica:
    client: httpx.AsyncClient
    state: dict[str, Any]
    settings: Settings

    def schedules(self, clock: FakeClock, name: str = "r1", **options: Any) -> Schedules:
        """A scheduler of this replica's on `clock` (`steal` as the app would choose)."""
        steal = self.state["schedules"].scheduler.options.steal  # the app's own choice
        return Schedules(
            manager=self.state["manager"],
            read=schedule_run_reader(self.settings, self.state["assembly"]),
            options=SchedulerOptions(
                name=name, steal=steal, lease_s=self.settings.lease_s, **options
            ),
            clock=clock,
        )


@asynccontextmanager
async def replica(settings: Settings) -> AsyncIterator[Replica]:
    app = create_app(settings)
    async with LifespanManager(app) as lifespan:
        transport = httpx.ASGITransport(app=lifespan.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Replica(client, lifespan._state, settings)


def store_url_of(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param in ("redis", "postgres"):
        url: str = request.getfixturevalue(f"{request.param}_url")
        return url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
