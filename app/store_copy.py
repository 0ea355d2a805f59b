"""`finishline store copy FROM_URL TO_URL`: every run of one store into another
(`app.runs.stores.copying`), with a progress line on a terminal and a summary at the end.
Exit 0 when every run is in the target and reads back the same; 1 otherwise (conflicts,
runs that do not read back, or a copy that did not verify), each named."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from app.runs.backends import open_store
from app.runs.stores.copying import CopyReport, copy_store


async def copy(from_url: str, to_url: str, *, out: TextIO = sys.stderr) -> CopyReport:
    source, target = open_store(from_url), open_store(to_url)
    await source.open()
    try:
        await target.open()
        try:
            tty = out.isatty()

            def progress(done: int, total: int) -> None:
                if tty:
                    width = 30
                    filled = width * done // max(total, 1)
                    bar = "#" * filled + "-" * (width - filled)
                    out.write(f"\r[{bar}] {done}/{total} runs")
                    out.flush()

            report = await copy_store(source, target, progress=progress)
            if tty:
                out.write("\n")
            return report
        finally:
            await target.close()
    finally:
        await source.close()


def summary(report: CopyReport) -> str:
    lines = [
        f"{report.total} runs: {report.copied} copied, {report.skipped} there already"
        f" (the same run), {len(report.conflicts)} conflicts; {report.threads} threads copied"
    ]
    for name, ids in (
        ("conflict (the target holds another run under this id; left as it is)", report.conflicts),
        ("unreadable in the source (not copied)", report.unreadable),
        ("copied but not read back the same", report.mismatched),
    ):
        lines += [f"  {name}: {run_id}" for run_id in ids]
    return "\n".join(lines)


def run(from_url: str, to_url: str) -> int:
    report = asyncio.run(copy(from_url, to_url))
    print(summary(report))
    return 0 if report.ok else 1
