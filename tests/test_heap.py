"""The collector is tuned while an app is served, and given back as it was when it stops."""

from __future__ import annotations

import gc

from app.heap import THRESHOLDS
from tests.fakes.service import api_client, service_settings


async def test_an_app_tunes_the_collector_while_served_and_restores_it_when_stopped() -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    async with api_client(service_settings()) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert gc.get_threshold() == THRESHOLDS
        assert gc.get_freeze_count() > frozen_before  # start-up's objects: out of collections
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
