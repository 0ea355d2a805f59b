"""The conversations guide's Threads curl session runs as it is written: each command, by
curl, against the app served on loopback on the demo model (only the address is put in)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import pytest

from tests.api.kit import settings
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = re.compile(r"<!-- threads:start -->\n```sh\n(.*?)```\n<!-- threads:end -->", re.S)


def commands() -> list[str]:
    found = SNIPPET.search(
        (ROOT / "docs" / "guides" / "conversations.md").read_text(encoding="utf-8")
    )
    assert found is not None, "the guide's Threads session is gone"
    joined = found.group(1).replace("\\\n", " ")
    return [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]


def streamed(out: str) -> list[dict[str, object]]:
    return [json.loads(line[6:]) for line in out.splitlines() if line.startswith("data: ")]


async def test_the_readme_threads_session_runs_as_written() -> None:
    session = commands()
    assert all(c.startswith("curl ") and "localhost:8000" in c for c in session)
    async with served_app(settings()) as (server, _):
        outs = []
        for command in session:
            with anyio.fail_after(30):
                done = await anyio.run_process(
                    ["sh", "-c", command.replace("localhost:8000", server.url().rstrip("/"))],
                    check=False,
                )
            assert done.returncode == 0, (command, done.stderr.decode())
            outs.append(done.stdout.decode())

    first, second, third, thread, runs, threads, patched, deleted = outs
    ends = [streamed(out)[-1] for out in (first, second, third)]
    assert [e["type"] for e in ends] == ["run.completed"] * 3
    ids = [streamed(out)[0]["run_id"] for out in (first, second, third)]
    assert json.loads(thread)["runs"] == 3
    assert json.loads(thread)["latest_run_id"] == ids[2]
    assert [r["id"] for r in json.loads(runs)["runs"]] == ids
    assert [r["previous_run_id"] for r in json.loads(runs)["runs"]] == [None, *ids[:2]]
    assert [t["id"] for t in json.loads(threads)["threads"]] == ["trip-42"]
    assert json.loads(patched)["metadata"] == {"title": "Sums"}
    assert deleted == ""  # 204
