"""The A2A guide's client snippet runs as it is written: in a process of its own, against the
app served on loopback with deploy/agents.example.json, an API key and the demo model (only
its URL and key are put in)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio
import pytest

from tests.a2a.kit import KEY_A, a2a_service, a2a_settings

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = re.compile(
    r"<!-- a2a-client:start -->\n```python\n(.*?)```\n<!-- a2a-client:end -->", re.S
)


def snippet() -> str:
    found = SNIPPET.search((ROOT / "docs" / "guides" / "a2a.md").read_text(encoding="utf-8"))
    assert found is not None, "the A2A guide's client snippet is gone"
    return found.group(1)


async def test_the_readme_client_snippet_streams_a_task_to_its_answer() -> None:
    code = snippet()
    assert 'URL = "http://localhost:8000/a2a/quick"' in code
    assert 'KEY = "YOUR_API_KEY"' in code
    settings = a2a_settings(agents="@deploy/agents.example.json", api_keys=[KEY_A])
    async with a2a_service(settings) as service:
        code = code.replace("http://localhost:8000", service.url()).replace("YOUR_API_KEY", KEY_A)
        with anyio.fail_after(60):
            done = await anyio.run_process([sys.executable, "-c", code], cwd=ROOT, check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    lines = out.splitlines()
    assert lines[0].startswith("TASK_STATE_WORKING")
    assert any(line.startswith("answer: ") for line in lines)
    assert lines[-1].startswith("TASK_STATE_COMPLETED")
