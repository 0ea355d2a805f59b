"""The AG-UI guide's first example runs as it is written: the page's code, under node with
@ag-ui/client (tests/agui_client, `make agui-client`), against the app served on loopback
with an API key and the demo model. Only the address and `apiKey` (which the page leaves to
the reader) are put in, and the result printed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import anyio
import pytest

from tests.api.kit import settings
from tests.fakes.service import served_app

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "agui_client"
KEY = "guide-key-0123456789"


def snippet() -> str:
    text = (ROOT / "docs" / "guides" / "agui.md").read_text(encoding="utf-8")
    found = re.search(r"```ts\n(.*?)```", text, re.S)
    assert found is not None, "the AG-UI guide's example is gone"
    return found.group(1)


async def test_the_guides_http_agent_example_runs_to_its_answer(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None, "the AG-UI client test needs node 20 (apt-get install nodejs)"
    assert (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir(), (
        "tests/agui_client/node_modules is missing: run `make agui-client` (npm ci)"
    )
    code = snippet()
    assert 'url: "http://localhost:8000/ag-ui"' in code
    (tmp_path / "node_modules").symlink_to(CLIENT / "node_modules")
    async with served_app(settings(api_keys=[KEY])) as (server, _):
        module = tmp_path / "example.mjs"
        module.write_text(
            f"const apiKey = {json.dumps(KEY)};\n"
            + code.replace("http://localhost:8000", server.url().rstrip("/"))
            + "\nconsole.log(JSON.stringify(result));\n",
            encoding="utf-8",
        )
        with anyio.fail_after(60):
            done = await anyio.run_process([node, str(module)], check=False)
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert (result["status"], result["reason"], result["degraded"]) == (
        "completed",
        "finished",
        False,
    )
    assert "42" in result["answer"]
    assert result["run_id"].startswith("run_")
