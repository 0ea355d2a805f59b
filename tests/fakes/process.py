"""The service as a real process: `python -m uvicorn --factory app.main:create_app`, for the
tests that kill it, restart it or send it SIGTERM.

    async with AppProcess(tmp_path, {"FINISHLINE_STORE_URL": f"sqlite:///{db}"}) as app:
        app.url("/healthz")                      # http://127.0.0.1:PORT/healthz
        app.terminate()                          # SIGTERM (or app.kill(): SIGKILL)
        code = await app.wait_exit(timeout_s=5)

The listening socket is bound to 127.0.0.1:0 here and handed to uvicorn with `--fd`, so the
port is known before the process starts and nobody can take it in between. Entering waits
for uvicorn's "Application startup complete." line on stderr (no polling, no sleep), under a
bound; a process that exits first raises with its stderr. stderr is read all along (the pipe
never fills); `wait_for_log(event)` waits for one of the app's JSON log lines by its `event`.

The child runs in `cwd` (give it a tmp_path: no `.env` of the repository is read, nothing is
written into the checkout) with the repository on PYTHONPATH, this process's environment
(the suite's autouse fixture has scrubbed FINISHLINE_* and proxies from it) plus `env`, and
JSON logs. Leaving the block kills a process still running and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

import anyio

from app.api.protocols import UVICORN_ARGS
from tests.fakes.serving import loopback_socket

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_LINE = "Application startup complete"


class AppProcessError(RuntimeError):
    """The process did not start, or did not do what a test waited for in time."""


class AppProcess:
    def __init__(
        self,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        *,
        uvicorn_args: Sequence[str] = (),
        start_timeout_s: float = 60,
    ) -> None:
        self.cwd = cwd
        self.env = dict(env or {})
        self.uvicorn_args = list(uvicorn_args)
        self.start_timeout_s = start_timeout_s
        self.port = 0
        self.lines: list[str] = []
        """Every stderr line so far, without the newline."""
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._new_line = asyncio.Event()  # replaced by a fresh one at each line
        self._eof = False

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode if self._process is not None else None

    def log_events(self) -> list[dict[str, Any]]:
        """The app's structured (JSON) log lines so far."""
        events = []
        for line in self.lines:
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                if isinstance(parsed, dict):
                    events.append(parsed)
        return events

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        sock = loopback_socket()
        try:
            self.port = sock.getsockname()[1]
            env = {
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p
                ),
                "PYTHONUNBUFFERED": "1",
                "NO_PROXY": "*",
                "FINISHLINE_LOG_FORMAT": "json",
                **self.env,
            }
            command = [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "app.main:create_app",
                "--fd",
                str(sock.fileno()),
                *UVICORN_ARGS,  # as make run and the image serve it
                *self.uvicorn_args,
            ]
            self._process = await asyncio.create_subprocess_exec(
                *command,
                cwd=self.cwd,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(sock.fileno(),),
            )
        finally:
            sock.close()  # the child has its own copy
        self._reader = asyncio.create_task(self._read_stderr())
        try:
            await self.wait_for_line(lambda line: STARTUP_LINE in line, self.start_timeout_s)
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Kill the process if it still runs; wait for it and for the end of its stderr."""
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
        await self.wait_exit(timeout_s=10)
        if self._reader is not None:
            with anyio.fail_after(10):
                await self._reader

    # -- signals and waiting ----------------------------------------------------------------

    def terminate(self) -> None:
        """SIGTERM: what an orchestrator sends to stop the service."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, no shutdown code runs."""
        self.send_signal(signal.SIGKILL)

    def send_signal(self, signum: int) -> None:
        assert self._process is not None, "not started"
        self._process.send_signal(signum)

    async def wait_exit(self, *, timeout_s: float) -> int:
        """The exit code, once the process has exited (negative: the signal that ended it)."""
        assert self._process is not None, "not started"
        with anyio.fail_after(timeout_s):
            return await self._process.wait()

    async def wait_for_line(self, matches: Any, timeout_s: float = 10) -> str:
        """The first stderr line for which `matches(line)` is true; raises if the process
        ends (its stderr reaches EOF) without one."""
        seen = 0
        with anyio.fail_after(timeout_s):
            while True:
                for line in self.lines[seen:]:
                    if matches(line):
                        return line
                seen = len(self.lines)
                if self._eof:
                    tail = "\n".join(self.lines[-40:])
                    raise AppProcessError(
                        f"the app process ended (exit code {self.returncode}) before the "
                        f"awaited log line; its stderr ends with:\n{tail}"
                    )
                await self._new_line.wait()

    async def wait_for_log(self, event: str, timeout_s: float = 10) -> dict[str, Any]:
        """The first JSON log line of the app whose `event` is `event`."""

        def matches(line: str) -> bool:
            with contextlib.suppress(ValueError):
                parsed = json.loads(line)
                return isinstance(parsed, dict) and parsed.get("event") == event
            return False

        return json.loads(await self.wait_for_line(matches, timeout_s))

    async def _read_stderr(self) -> None:
        assert self._process is not None
        stderr = self._process.stderr
        assert stderr is not None
        try:
            async for raw in stderr:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\r\n"))
                self._wake()
        finally:
            self._eof = True
            self._wake()

    def _wake(self) -> None:
        new_line, self._new_line = self._new_line, asyncio.Event()
        new_line.set()
