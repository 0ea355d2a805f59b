"""Fixtures of the tool tests: a real local HTTP server, a fake DNS, a run context."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence

import pytest

from app.engine.ports import ToolContext
from tests.tools.local_server import LocalServer


@pytest.fixture
async def server() -> AsyncIterator[LocalServer]:
    async with LocalServer() as local:
        yield local


@pytest.fixture
def ctx() -> ToolContext:
    return ToolContext(run_id="run-test")


class FakeDNS:
    """A resolver over a fixed map; records every lookup; unknown names fail like DNS does."""

    def __init__(self, records: Mapping[str, Sequence[str]]) -> None:
        self.records = dict(records)
        self.lookups: list[str] = []

    async def __call__(self, host: str) -> list[str]:
        self.lookups.append(host)
        if host not in self.records:
            raise OSError(f"[Errno -2] Name or service not known: {host}")
        return list(self.records[host])


@pytest.fixture
def dns() -> FakeDNS:
    return FakeDNS(
        {
            "app.test": ["127.0.0.1"],
            "internal.test": ["10.0.0.1"],
            "metadata.test": ["169.254.169.254"],
            "loopback.test": ["127.0.0.1"],
            "mixed.test": ["93.184.216.34", "10.0.0.1"],
        }
    )
