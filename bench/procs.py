"""Processes of the service benchmark: the server (uvicorn on a socket bound here, as
`tests/fakes/process.py` does), the fake LLM server, and what /proc says about each."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from app.api.protocols import UVICORN_ARGS
from bench.common import ROOT
from tests.fakes.serving import loopback_socket

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def run_seconds(pid: int) -> float:
    """CPU time of a process's live threads in ns resolution (/proc/<pid>/task/*/schedstat),
    not /proc/<pid>/stat's 10 ms ticks: a block of cheap runs costs a few ticks only. Threads
    that ended are not counted (a server's threads live as long as it does)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def tree_run_seconds(pid: int) -> float:
    """run_seconds of a process and of its live descendants (`langgraph dev` may start
    workers)."""
    total = 0.0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            total += run_seconds(current)
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return total


def peak_rss_mb(pid: int) -> float:
    """VmHWM: the peak resident set size of a process so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FINISHLINE_", "OPENAI_"))}
    env.update(
        {
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
            "NO_PROXY": "*",
            **extra,
        }
    )
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        env.pop(name, None)
    return env


class Server:
    """`python -m uvicorn --factory app.main:create_app --fd N`, stderr to a file; `factory`
    names another app (the benchmark's floor)."""

    def __init__(
        self,
        workdir: Path,
        env: Mapping[str, str],
        factory: str = "app.main:create_app",
        wrapper: Sequence[str] = (),
    ) -> None:
        self.factory = factory
        self.wrapper = tuple(wrapper)
        """A command the server runs under (`valgrind --tool=callgrind …`)."""
        self.workdir = workdir
        self.env = dict(env)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "server.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        sock = loopback_socket(4096)
        try:
            self.port = sock.getsockname()[1]
            with self.log_path.open("ab") as log:
                self.process = subprocess.Popen(
                    [
                        *self.wrapper,
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "--factory",
                        self.factory,
                        "--fd",
                        str(sock.fileno()),
                        "--backlog",
                        "4096",
                        # the service as make run and the image serve it (not the floor)
                        *(UVICORN_ARGS if self.factory == "app.main:create_app" else ()),
                    ],
                    cwd=self.workdir,
                    env=child_env(self.env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(sock.fileno(),),
                )
        finally:
            sock.close()
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: see {self.log_path}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: see {self.log_path}")
            time.sleep(0.05)  # noqa: TID251 (a benchmark polls; tests never do)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class FakeLLM:
    """`python -m bench.fake_llm` in a process of its own."""

    def __init__(self, latency_ms: float, steps: int) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.fake_llm",
                "--latency-ms",
                str(latency_ms),
                "--steps",
                str(steps),
            ],
            cwd=ROOT,
            env=child_env({}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode()
        if not line.startswith("port "):
            raise RuntimeError(f"the fake LLM server did not start: {line!r}")
        self.port = int(line.split()[1])

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def one_run(client: httpx.Client, body: dict[str, Any]) -> None:
    """POST `body` and wait for the run's end; a run that does not complete fails the bench."""
    created = client.post("/runs", json=body)
    created.raise_for_status()
    run_id = created.json()["id"]
    ended = client.get(f"/runs/{run_id}/wait", params={"timeout_s": 60}).json()
    if ended["status"] != "completed":
        raise RuntimeError(f"a benchmark run did not complete: {ended}")


def cpu_per_side(
    sides: Mapping[str, dict[str, Any]], rounds: int, runs: int
) -> dict[str, list[float]]:
    """Server CPU ms per run of each side's body, block by block in shuffled order, on one
    finishline served on SQLite with INFO logs (every path warmed first)."""
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(
            Path(tmp),
            {
                "FINISHLINE_STORE_URL": f"sqlite:///{Path(tmp) / 'finishline.db'}",
                "FINISHLINE_LOG_LEVEL": "INFO",
                "FINISHLINE_LOG_FORMAT": "json",
            },
        )
        server.start()
        try:
            cpu: dict[str, list[float]] = {name: [] for name in sides}
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for body in sides.values():  # warm every path (imports, caches)
                    for _ in range(3):
                        one_run(client, body)
                order = list(sides)
                for _ in range(rounds):
                    random.shuffle(order)
                    for name in order:
                        before = run_seconds(server.pid)
                        for _ in range(runs):
                            one_run(client, sides[name])
                        spent = run_seconds(server.pid) - before
                        cpu[name].append(spent / runs * 1e3)
        finally:
            server.stop()
    return cpu
