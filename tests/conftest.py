"""Suite-wide fixtures: async tests on asyncio, and an environment that cannot reach a real LLM."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator

import pytest
import structlog

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
