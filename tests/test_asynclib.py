"""The loop thread names its async library while an app is served (`app.asynclib`), and
forgets it when the app stops."""

from __future__ import annotations

import threading

import anyio
import sniffio

from tests.fakes.service import api_client, service_settings


async def test_sniffio_answers_asyncio_from_its_thread_local_while_an_app_is_served() -> None:
    assert sniffio.thread_local.name is None
    async with api_client(service_settings()) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert sniffio.thread_local.name == "asyncio"
        assert sniffio.current_async_library() == "asyncio"
        elsewhere: list[str | None] = []
        worker = threading.Thread(target=lambda: elsewhere.append(sniffio.thread_local.name))
        worker.start()
        await anyio.to_thread.run_sync(worker.join)
        assert elsewhere == [None]  # the loop's thread only
    assert sniffio.thread_local.name is None
