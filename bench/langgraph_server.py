"""LangGraph's own server as the service benchmark's peer: `langgraph dev` (in memory, no
reload, no browser, `--n-jobs-per-worker` raised) serving `bench/langgraph_agent.py` from a
temporary directory with a generated `langgraph.json`.

It runs from its own venv, `.venv-langgraph` (`make bench` builds it from
requirements/langgraph-server.txt): every langgraph-api release pins structlog<26 and
finishline needs 26, so the two cannot share one. Runs are followed through LangGraph's
streaming API, `POST /runs/stream` (a stateless run, SSE), by `bench/service_client.py`.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.common import ROOT
from bench.procs import child_env

VENV = ROOT / ".venv-langgraph"
CLI = VENV / "bin" / "langgraph"
JOBS_PER_WORKER = 2000
"""Runs one worker executes at once (LangGraph's default is 10: more would queue)."""


def available() -> str | None:
    """None when `langgraph dev` can run, else why not."""
    if not CLI.exists():
        return f"{CLI.relative_to(ROOT)} is missing: run `make bench` (it builds .venv-langgraph)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LangGraphServer:
    """`langgraph dev` in a process of its own; stop() ends it and removes its directory."""

    def __init__(self, llm_base_url: str) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="finishline-bench-langgraph-"))
        shutil.copy(Path(__file__).with_name("langgraph_agent.py"), self.workdir / "agent.py")
        config = {"dependencies": ["."], "graphs": {"agent": "./agent.py:graph"}}
        (self.workdir / "langgraph.json").write_text(json.dumps(config))
        self.llm_base_url = llm_base_url
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "server.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> None:
        self.port = _free_port()
        env = child_env(
            {
                "BENCH_LLM_BASE_URL": self.llm_base_url,
                "LANGGRAPH_CLI_NO_ANALYTICS": "1",
                "LANGSMITH_TRACING": "false",
                "LANGCHAIN_TRACING_V2": "false",
            }
        )
        env.pop("PYTHONPATH", None)
        env["PATH"] = f"{VENV / 'bin'}:{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(VENV)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [
                    str(CLI),
                    "dev",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--no-browser",
                    "--no-reload",
                    "--n-jobs-per-worker",
                    str(JOBS_PER_WORKER),
                    "--server-log-level",
                    "WARNING",
                    "--config",
                    str(self.workdir / "langgraph.json"),
                ],
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"langgraph dev exited: {self.tail()}")
            try:
                if httpx.get(f"{self.url}/ok", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"langgraph dev did not start: {self.tail()}")
            time.sleep(0.1)  # noqa: TID251 (a benchmark polls; tests never do)

    def tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)
