"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.kit import sqlite_url


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store the service ships with: tests taking this run once on each (Redis: the
    session's real redis-server, flushed)."""
    if request.param == "memory":
        return "memory://"
    if request.param == "redis":
        url: str = request.getfixturevalue("redis_url")
        return url
    return sqlite_url(tmp_path)


@pytest.fixture(params=["redis", "postgres"])
def shared_url(request: pytest.FixtureRequest) -> str:
    """Each store replicas share: the session's real redis-server (flushed), a new database
    of the session's real Postgres."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url
