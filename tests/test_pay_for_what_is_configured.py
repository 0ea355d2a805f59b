"""A deployment pays for what it configures (#29): with no MCP server, no Redis store, no
tracing endpoint and no CLI, the server process imports none of their libraries, not at
`import app.main`, not while the app is built, started and answering.

Each heavy library is listed once below with what brings it in: a new optional part (A2A,
AG-UI, ...) adds its packages here and imports them only where it is configured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

HEAVY_UNLESS_CONFIGURED: dict[str, str] = {
    "mcp": "the MCP SDK: FINISHLINE_MCP_SERVERS (app.main imports the MCP source only then)",
    "mcp_types": "the MCP SDK's types: FINISHLINE_MCP_SERVERS",
    "httpx2": "the MCP SDK's HTTP client: FINISHLINE_MCP_SERVERS",
    "httpcore2": "the MCP SDK's HTTP client: FINISHLINE_MCP_SERVERS",
    "redis": "the Redis client: FINISHLINE_STORE_URL=redis://",
    "psycopg": "the Postgres driver: FINISHLINE_STORE_URL=postgresql://",
    "psycopg_pool": "the Postgres pool: FINISHLINE_STORE_URL=postgresql://",
    "opentelemetry.sdk": "the OTel SDK: OTEL_EXPORTER_OTLP_ENDPOINT (the API alone is cheap)",
    "opentelemetry.exporter": "the OTLP exporter: OTEL_EXPORTER_OTLP_ENDPOINT",
    "rich": "the CLI's display: the cli extra, which the server does without",
    "pygments": "rich's highlighter: the cli extra",
    "genai_prices": "LLM prices: an LLM endpoint (FINISHLINE_LLM_BASE_URL / an API key)",
    "ag_ui": "AG-UI's protocol package: the first POST /ag-ui",
    "aiohttp": "the outbound HTTP transport: an LLM endpoint (at start-up), else the first "
    "HTTP tool call, webhook or remote agent (imported in a worker thread, app.tools.fetcher)",
    "jsonschema": "JSON Schema checks: a run's first tool call (imported in a worker thread as "
    "the run is assembled) or a request's schemas (checked in a worker thread)",
    "a2a": "the A2A SDK: agent profiles (FINISHLINE_AGENTS), or a remote agent's first call",
    "jwt": "PyJWT, which checks access tokens: FINISHLINE_OIDC_ISSUER (app.identity.bearer)",
    "cryptography": "the signatures under PyJWT: FINISHLINE_OIDC_ISSUER",
}

CLI_EXTRA = ("rich", "pygments", "markdown_it", "mdurl")
"""What `pip install 'finishline[cli]'` adds: absent from a server install (the image is
built from requirements/main.txt), so hidden here. structlog imports rich whenever it can."""

PROBE = """
import asyncio, json, sys
for name in {cli_extra!r}:
    sys.modules[name] = None  # an install without the cli extra: `import rich` fails

def imported():
    return sorted(name for name, module in sys.modules.items() if module is not None)

import app.main
at_import = imported()

import httpx
from asgi_lifespan import LifespanManager
from app.settings import Settings

async def serve():
    served = app.main.create_app(Settings(_env_file=None, store_url={store!r}))
    async with LifespanManager(served) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            for path in ("/healthz", "/readyz", "/tools", "/settings"):
                assert (await client.get(path)).status_code == 200, path

asyncio.run(serve())
print(json.dumps({{"import": at_import, "served": imported()}}))
"""


def loaded(heavy: str, modules: list[str]) -> bool:
    return any(m == heavy or m.startswith(heavy + ".") for m in modules)


@pytest.mark.parametrize("store", ["memory://", "sqlite"])
def test_a_server_with_nothing_optional_configured_imports_no_heavy_library(
    store: str, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}" if store == "sqlite" else store
    code = PROBE.format(cli_extra=CLI_EXTRA, store=url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FINISHLINE_", "OTEL_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # no .env of the checkout is read
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    for moment in ("import", "served"):
        present = [heavy for heavy in HEAVY_UNLESS_CONFIGURED if loaded(heavy, modules[moment])]
        assert present == [], f"imported at {moment}: " + "; ".join(
            f"{heavy} ({HEAVY_UNLESS_CONFIGURED[heavy]})" for heavy in present
        )


def test_the_server_install_has_no_cli_extra() -> None:
    """The image installs requirements/main.txt: none of the cli extra's packages."""
    pins = (ROOT / "requirements" / "main.txt").read_text(encoding="utf-8")
    names = {"rich", "pygments", "markdown-it-py", "mdurl"}
    assert [n for n in names if f"\n{n}==" in pins] == []


def test_an_llm_endpoint_loads_the_http_transport_at_start_up_not_at_its_first_call() -> None:
    """aiohttp's imports (~130 ms) are paid when the model factory is built, with the app,
    never by the first run's call on the event loop."""
    code = (
        "import sys\n"
        "from app.llm.models import ModelFactory\n"
        "before = 'aiohttp' in sys.modules\n"
        "ModelFactory(base_url='http://127.0.0.1:9/v1', api_key=None, default_model='m')\n"
        "print(before, 'aiohttp' in sys.modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
