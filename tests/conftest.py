"""Suite-wide fixtures: async tests on asyncio, and an environment that cannot reach a real LLM."""

from __future__ import annotations

import inspect
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from tests.fakes.postgres_server import PostgresServer
from tests.fakes.redis_server import RedisServer


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector: pytest.Collector, name: str, obj: object) -> None:
    """Every `async def` test runs under anyio (on asyncio), with no marker to forget."""
    if inspect.iscoroutinefunction(obj) and name.startswith("test"):
        pytest.mark.anyio(obj)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


_SCRUBBED_PREFIXES = ("FINISHLINE_", "OPENAI_", "OTEL_")
_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No FINISHLINE_*/OPENAI_*/OTEL_* settings or proxies leak in from the developer's shell."""
    for name in list(os.environ):
        if name.startswith(_SCRUBBED_PREFIXES) or name in _PROXY_VARS:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "*")


@pytest.fixture(autouse=True)
def _default_structlog() -> Iterator[None]:
    """Each test starts with structlog's defaults: an app built earlier (create_app
    configures logging for the process, at WARNING in tests) cannot filter what a test reads
    with `capture_logs()`."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server (no persistence) for the whole session."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of an empty database of the session's redis-server."""
    with redis_server.client() as client:
        client.flushdb()
    return redis_server.url()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One real PostgreSQL (fsync off) for the whole session, or the one
    FINISHLINE_TEST_POSTGRES_URL names. Its directory is outside pytest's (root's, 0700):
    the server runs as the `postgres` user when the tests are root."""
    directory = Path(tempfile.mkdtemp(prefix="finishline-pg-"))
    try:
        with PostgresServer(directory) as server:
            yield server
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new empty database of the session's Postgres, as the service's role."""
    return postgres_server.url(postgres_server.database())
