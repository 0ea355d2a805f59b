"""Instructions the server executes per run, counted by callgrind: a figure that does not
move with the load other processes put on a shared machine, unlike CPU time or latency.

The server (`uvicorn --factory app.main:create_app`, SQLite store, INFO logs, as in
`bench.service`) runs under `valgrind --tool=callgrind`; after a warm-up the counters are
zeroed, `--workers` clients start `--runs` 5-step scripted runs each (bench.service_client),
and the counters are dumped: every thread of the server, C code included, kernel time not.
Valgrind slows the server ~50×, so runs batch less than they would at full speed; compare
counts taken at the same `--workers`.

    python -m bench.instructions [--workers 1] [--runs 20] [--store sqlite|memory]
        [--env FINISHLINE_QUOTA_CONCURRENT_RUNS=5000 ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from app.api.protocols import UVICORN_ARGS
from bench.procs import child_env
from bench.service import run_clients
from tests.fakes.serving import loopback_socket


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--runs", type=int, default=20, help="runs per worker")
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the server (repeatable)"
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="finishline-callgrind-"))
    store = f"sqlite:///{work / 'finishline.db'}" if args.store == "sqlite" else "memory://"
    env = {
        "FINISHLINE_STORE_URL": store,
        "FINISHLINE_MAX_CONCURRENT_RUNS": "5000",
        "FINISHLINE_MAX_QUEUED_RUNS": "5000",
        "FINISHLINE_LOG_LEVEL": "INFO",
        "FINISHLINE_LOG_FORMAT": "json",
        **dict(pair.split("=", 1) for pair in args.env),
    }
    sock = loopback_socket(4096)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    command = [
        *("valgrind", "--tool=callgrind", f"--callgrind-out-file={work}/callgrind.%p"),
        *(sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", *UVICORN_ARGS),
        *("--fd", str(sock.fileno())),
    ]
    with (work / "server.log").open("ab") as log:
        server = subprocess.Popen(
            command,
            cwd=work,
            env=child_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            pass_fds=(sock.fileno(),),
        )
    sock.close()
    try:
        deadline = time.monotonic() + 600
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"the server exited: see {work / 'server.log'}")
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)  # noqa: TID251 (a benchmark polls; tests never do)
        run_clients(url, "scripted", min(args.workers, 10), 2, work, "warmup")
        subprocess.run(
            ["callgrind_control", "--zero", str(server.pid)], check=True, capture_output=True
        )
        outputs = run_clients(url, "scripted", args.workers, args.runs, work, "measure")
        runs = sum(len(out["runs"]) for out in outputs)
        dumped = set(work.glob("callgrind.*"))
        subprocess.run(
            ["callgrind_control", "--dump", str(server.pid)], check=True, capture_output=True
        )
        files = set(work.glob("callgrind.*")) - dumped
        total = sum(_total(path) for path in files)
    finally:
        server.terminate()
        server.wait()
    print(f"{args.workers} workers, {runs} runs: {total / runs / 1e6:.2f} M instructions/run")


def _total(path: Path) -> int:
    with path.open(errors="replace") as handle:
        for line in handle:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise ValueError(f"no totals in {path}")


if __name__ == "__main__":
    main()
