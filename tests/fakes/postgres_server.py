"""A real PostgreSQL server for the tests: Debian's `initdb` and `pg_ctl` in a temporary
directory, on a free loopback port. Never a mock.

    with PostgresServer(tmp_dir) as server:     # waits until it accepts connections
        server.url(database)                    # postgresql://finishline:…@127.0.0.1:PORT/db
        server.admin_url()                      # the superuser's, for the tests' own checks

`initdb` and `postgres` refuse to run as root, and CI runs as root: when the tests are root,
the server runs as the `postgres` user (`runuser -u postgres --`), its directory handed to
that user. The service under test connects as `finishline`, a role that is not a superuser
and owns the databases it is given (`database()` makes a fresh one per test). `fsync` is off
for speed unless `durable=True` (the durability tests).

`FINISHLINE_TEST_POSTGRES_URL` (a superuser's URL) names a server to use instead: then
nothing is started, and `database()` makes its databases there.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import urlsplit, urlunsplit

import psycopg

from tests.fakes.serving import loopback_socket

EXTERNAL_URL = os.environ.get("FINISHLINE_TEST_POSTGRES_URL", "")
"""Read once, at import: the suite scrubs FINISHLINE_* from each test's environment."""
ROLE = "finishline"
PASSWORD = "finishline-test"
START_TIMEOUT_S = 30
ATTEMPTS = 3


class PostgresServerError(RuntimeError):
    """PostgreSQL is not installed, or did not start."""


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise PostgresServerError(f"{name} not found: apt-get install postgresql")
    return found[-1]  # the newest installed


class PostgresServer:
    def __init__(self, directory: Path, *, durable: bool = False, own: bool = False) -> None:
        """`own`: start one here even when FINISHLINE_TEST_POSTGRES_URL names a server (the
        tests that stop, restart or reconfigure it)."""
        self.directory = directory
        self.durable = durable
        self.port = 0
        self.external = "" if own else EXTERNAL_URL
        self.data = directory / "data"
        self._as_postgres = os.geteuid() == 0
        self._started = False

    # -- URLs ---------------------------------------------------------------------------------

    def admin_url(self, database: str = "postgres") -> str:
        if self.external:
            parts = urlsplit(self.external)
            return urlunsplit(parts._replace(path="/" + database))
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def url(self, database: str) -> str:
        """The service's URL: the `finishline` role, not a superuser."""
        host = urlsplit(self.admin_url()).netloc.rpartition("@")[2]
        return f"postgresql://{ROLE}:{PASSWORD}@{host}/{database}"

    def admin(self, database: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(self.admin_url(database), autocommit=True)

    def database(self) -> str:
        """A new empty database owned by the service's role; its name."""
        name = "t_" + uuid.uuid4().hex[:16]
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}" OWNER {ROLE}')
        return name

    # -- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> Self:
        if not self.external:
            self._initdb()
            for _ in range(ATTEMPTS):
                if self._start():
                    break
            else:
                raise PostgresServerError("postgres did not start:\n" + self.log_tail())
        self._make_role()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`pg_ctl stop -m fast`; "immediate" is a crash: no checkpoint)."""
        if self.external or not self._started:
            return
        self._started = False
        self._run([_bin("pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w"], check=False)

    def start_again(self) -> None:
        """Start a stopped server again on the same port and data directory."""
        if not self._start(port=self.port):
            raise PostgresServerError("postgres did not start again:\n" + self.log_tail())

    def pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def pause(self) -> None:
        """Freeze the postmaster and every backend (SIGSTOP): nothing is answered."""
        self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_all(signal.SIGCONT)

    def log_tail(self) -> str:
        log = self.directory / "postgres.log"
        return "\n".join(log.read_text().splitlines()[-30:]) if log.exists() else ""

    # -- plumbing -----------------------------------------------------------------------------

    def _signal_all(self, sig: signal.Signals) -> None:
        out = subprocess.run(
            ["pgrep", "-P", str(self.pid())], capture_output=True, text=True, check=False
        )
        for pid in [self.pid(), *map(int, out.stdout.split())]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _run(self, argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        if self._as_postgres:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        return subprocess.run(
            argv, capture_output=True, text=True, check=check, stdin=subprocess.DEVNULL
        )

    def _initdb(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
            os.chmod(self.directory, 0o700)
        try:
            self._run(
                [_bin("initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
                 "--no-sync", "-E", "UTF8", "--locale=C"]
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            raise PostgresServerError(f"initdb failed: {exc.stderr}") from exc
        settings = [
            "listen_addresses = '127.0.0.1'",
            "unix_socket_directories = ''",
            "max_connections = 300",
            "shared_buffers = 32MB",
            f"fsync = {'on' if self.durable else 'off'}",
            f"synchronous_commit = {'on' if self.durable else 'off'}",
            "full_page_writes = off" if not self.durable else "",
        ]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(settings) + "\n")
        # the service's role signs in with a password; the tests' superuser is trusted
        (self.data / "pg_hba.conf").write_text(
            f"host all {ROLE} 127.0.0.1/32 scram-sha-256\nhost all postgres 127.0.0.1/32 trust\n"
        )

    def _start(self, *, port: int = 0) -> bool:
        if port:
            self.port = port
        else:
            with contextlib.closing(loopback_socket()) as sock:
                self.port = sock.getsockname()[1]
        done = self._run(
            [
                _bin("pg_ctl"), "start", "-D", str(self.data), "-w",
                "-t", str(START_TIMEOUT_S), "-l", str(self.directory / "postgres.log"),
                "-o", f"-p {self.port}",
            ],
            check=False,
        )  # fmt: skip
        self._started = done.returncode == 0
        return self._started

    def _make_role(self) -> None:
        with self.admin() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (ROLE,)).fetchone()
            if exists is None:
                conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}' NOSUPERUSER")
