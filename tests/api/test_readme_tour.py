"""The README's one-minute tour and the first-run guide's curl session run as they are written:
each command, by curl, against the app served on loopback on the demo model (only the address
is put in, and RUN_ID: the id the first command's run got)."""

from __future__ import annotations

import json

import pytest

from tests.api.sessions import commands, run_session, streamed

pytestmark = pytest.mark.e2e


async def test_the_readme_tour_runs_as_written() -> None:
    tour = commands("README.md", r"<!-- tour:start -->\n```sh\n(.*?)```\n<!-- tour:end -->")
    started, events, ended = await run_session(tour)
    run = json.loads(started)
    assert run["status"] in ("queued", "running")
    stream = streamed(events)
    assert stream[0]["type"] == "run.queued"
    assert stream[-1]["type"] == "run.completed"
    assert {"action", "observation"} <= {e["type"] for e in stream}
    result = json.loads(ended)
    assert result["id"] == run["id"]
    assert result["status"] == "completed"
    assert result["result"]["reason"] == "finished"
    assert result["result"]["degraded"] is False
    assert "391" in result["result"]["answer"]  # 17 * 23, by the calculator


async def test_the_first_run_guides_curl_session_runs_as_written() -> None:
    session = commands("docs/guides/first-run.md", r"## Try it with curl\n\n```sh\n(.*?)```")
    outs = await run_session(session)
    started, events, resumed, page, ended, cancel, streamed_run, listed, deleted = outs
    run_id = json.loads(started)["id"]
    assert streamed(events)[-1]["type"] == "run.completed"
    assert next(e["seq"] for e in streamed(resumed)) == 6  # after Last-Event-ID: 5
    assert [e["seq"] for e in json.loads(page)["events"]][:3] == [1, 2, 3]
    assert json.loads(ended)["status"] == "completed"
    assert json.loads(cancel)["error"]["type"] == "run_already_ended"  # it had ended
    assert streamed(streamed_run)[-1]["type"] == "run.completed"
    assert run_id in [r["id"] for r in json.loads(listed)["runs"]]
    assert deleted == ""  # 204
