"""A real `redis-server` for the tests: a subprocess on a free loopback port, no persistence.

    with RedisServer(tmp_dir) as server:         # waits until it answers PING
        server.url(db=0)                         # redis://127.0.0.1:PORT/0

The suite starts one per session (`redis_server` in tests/conftest.py); each test that uses
it gets a flushed database (`redis_url`). Never a mock: the scripts, streams and blocking
reads under test are Redis's own.

The port is found by binding 127.0.0.1:0 and closing the socket, so another process could
take it before redis-server binds it: redis-server then exits at once ("Address already in
use"), and the start is retried on a new port. Start-up waits for redis-server's "Ready to
accept connections" line on its stdout, under a bound, then checks it answers PING.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from types import TracebackType
from typing import Self

import redis

from tests.fakes.serving import loopback_socket

READY_LINE = "Ready to accept connections"
START_TIMEOUT_S = 20
ATTEMPTS = 5


class RedisServerError(RuntimeError):
    """redis-server is missing, or did not start."""


class RedisServer:
    def __init__(self, directory: Path, *, extra_args: tuple[str, ...] = ()) -> None:
        self.directory = directory
        self.extra_args = extra_args
        self.port = 0
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self.output: list[str] = []

    @property
    def process(self) -> subprocess.Popen[str] | None:
        return self._process

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def __enter__(self) -> Self:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisServerError("redis-server is not installed (apt-get install redis-server)")
        for _ in range(ATTEMPTS):
            if self._start(binary):
                return self
        raise RedisServerError("redis-server did not start:\n" + "\n".join(self.output[-30:]))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and close its pipe."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        if self._reader is not None:
            self._reader.join(timeout=10)  # the pipe reached EOF with the process's end
        if process.stdout is not None:
            process.stdout.close()

    def kill(self) -> None:
        """Crash the server (SIGKILL): no final save, no final write of its append-only file."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        self.stop()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections are accepted, nothing is answered."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused server go on (SIGCONT)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def start_again(self) -> None:
        """Start a stopped server again on the same port and directory: with `--save ''`
        and no AOF, an empty Redis, as after a crash of one that kept nothing; with
        `extra_args` turning AOF on, what its append-only file kept."""
        binary = shutil.which("redis-server")
        assert binary is not None
        if not self._start(binary, port=self.port):
            raise RedisServerError(
                "redis-server did not start again:\n" + "\n".join(self.output[-30:])
            )

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis.from_url(self.url(db), decode_responses=True)

    def _start(self, binary: str, *, port: int = 0) -> bool:
        if port:
            self.port = port
        else:
            with contextlib.closing(loopback_socket()) as sock:
                self.port = sock.getsockname()[1]
        self._process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
                *self.extra_args,  # later options win: ("--appendonly", "yes") turns AOF on
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        ready, seen = threading.Event(), threading.Event()
        self._reader = threading.Thread(
            target=self._read_output, args=(self._process, ready, seen), daemon=True
        )
        self._reader.start()
        ready.wait(START_TIMEOUT_S)
        if not seen.is_set():  # it exited (the port was taken) or never got ready
            self.stop()
            return False
        with self.client() as client:
            client.ping()
        return True

    def _read_output(
        self, process: subprocess.Popen[str], ready: threading.Event, seen: threading.Event
    ) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.output.append(line.rstrip("\n"))
            if READY_LINE in line:
                seen.set()
                ready.set()
        ready.set()  # EOF: the process ended
