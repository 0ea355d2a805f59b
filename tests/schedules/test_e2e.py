"""End to end, on the real clock: a server on loopback with a SQLite file fires a real cron
(six fields, every two seconds: no test waits for a minute), the run ends, the firing is kept,
and /metrics counts it with its lag."""

from __future__ import annotations

from pathlib import Path

import anyio

from tests.api.kit import finishing, settings
from tests.fakes.service import served_app


async def test_a_real_cron_fires_within_seconds_and_the_firing_is_kept(tmp_path: Path) -> None:
    config = settings(store_url=f"sqlite:///{tmp_path / 'runs.db'}")
    async with served_app(config) as (_, client):
        made = await client.post(
            "/schedules", json={"cron": "*/2 * * * * *", "run": finishing("on time")}
        )
        assert made.status_code == 201, made.text
        firings = f"/schedules/{made.json()['id']}/firings"
        with anyio.fail_after(10):  # a due time every 2 s
            while True:
                page = (await client.get(firings)).json()["firings"]
                if page and page[-1]["outcome"] != "claimed":
                    break
                await anyio.sleep(0.05)
        firing = page[-1]
        assert (firing["outcome"], firing["manual"], firing["missed"]) == ("fired", False, 0)
        run = (await client.get(f"/runs/{firing['run_id']}/wait?timeout_s=10")).json()
        assert (run["status"], run["result"]["answer"]) == ("completed", "on time")
        assert run["schedule_id"] == made.json()["id"]
        metrics = (await client.get("/metrics")).text
        assert 'finishline_schedule_firings_total{outcome="fired"}' in metrics
        assert "finishline_schedule_firing_lag_seconds_count" in metrics
