"""Running a page's shell session as it is written: each command by `sh`, against the app
served on loopback (only the address is put in, and the ids the page cannot know: RUN_ID is
the first run the session started, and what `ids` maps). Between commands the session waits,
as a reader would, until no run is queued or running (a bounded wait on the API)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx

from tests.api.kit import settings
from tests.fakes.service import served_app

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
"""Where `finishline` is installed (the venv of the tests)."""


def commands(
    document: str, pattern: str, index: int = 0, programs: tuple[str, ...] = ("curl ",)
) -> list[str]:
    """The commands of the `index`-th block `pattern` finds in `document` (comments dropped),
    each a call of one of `programs` to the service (curl: at localhost:8000)."""
    found = list(re.finditer(pattern, (ROOT / document).read_text(encoding="utf-8"), re.S))
    assert len(found) > index, f"{document}: the session is gone"
    lines: list[str] = []
    pending = ""
    for line in found[index].group(1).replace("\\\n", " ").splitlines():
        if not pending and (not line.strip() or line.startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quote still open: the command goes on on the next line
            continue
        lines.append(pending)
        pending = ""
    assert not pending, f"{document}: an unclosed quote"
    assert all(line.startswith(programs) for line in lines), lines
    assert all("localhost:8000" in line for line in lines if line.startswith("curl "))
    return lines


async def settled(client: httpx.AsyncClient) -> None:
    """No run queued or running (a run waiting for a person counts as settled)."""
    with anyio.fail_after(30):
        while True:
            busy = (await client.get("/runs", params={"status": "queued,running"})).json()
            if not busy["runs"]:
                return
            run_id = busy["runs"][0]["id"]
            await client.get(f"/runs/{run_id}/wait", params={"timeout_s": 10})


async def run_session(
    session: list[str], fill: Callable[[str, list[str]], str] | None = None, **overrides: object
) -> list[str]:
    """Each command's output. `fill(command, outputs so far)` puts in what the page leaves to
        the reader; RUN_ID is filled with the first run the session started. `finishline` (the
        CLI, from this interpreter's environment) talks to the same server (FINISHLINE_URL). With
    `api_keys`, the waits between commands use the first."""
    outs: list[str] = []
    keys = overrides.get("api_keys")
    headers = {"Authorization": f"Bearer {keys[0]}"} if isinstance(keys, list) else {}
    async with served_app(settings(**overrides), headers=headers) as (server, client):
        for command in session:
            if fill is not None:
                command = fill(command, outs)
            if outs and "RUN_ID" in command:
                command = command.replace("RUN_ID", json.loads(outs[0])["id"])
            url = server.url().rstrip("/")
            env = {**os.environ, "FINISHLINE_URL": url, "PATH": f"{BIN}:{os.environ['PATH']}"}
            with anyio.fail_after(30):
                done = await anyio.run_process(
                    ["sh", "-c", command.replace("localhost:8000", url)], check=False, env=env
                )
            assert done.returncode == 0, (command, done.stderr.decode())
            outs.append(done.stdout.decode())
            await settled(client)
    return outs


def streamed(out: str) -> list[dict[str, object]]:
    return [json.loads(line[6:]) for line in out.splitlines() if line.startswith("data: ")]
