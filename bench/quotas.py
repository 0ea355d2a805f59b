"""What quotas cost per POST /runs and per LLM call, on the SQLite store (issue #24), as
callgrind counts it: N admissions (`LocalQuotas.admit` around the run's `store.create`, as
`Admission.create` does) or N calls' spends (`Quotas.spend` after the `llm.call` event's
`append_soon`, as `RunRecorder.record` does), with given quotas; the same N without quotas
code (`bare`) is the baseline. Subtract the two counts and divide by N:

    valgrind --tool=callgrind python -m bench.quotas admit bare 300
    valgrind --tool=callgrind python -m bench.quotas admit all 300

Kinds: admit, spend. Quotas: bare (no quotas code), none (the code, no quota set),
concurrent, rpm, day, all.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from app.engine.events import EventType
from app.runs.quotas.local import LocalQuotas
from app.runs.quotas.seam import QuotaLimits
from app.runs.records import RunRecord, new_run_id
from app.runs.store import DayUsage
from app.runs.stores.sqlite import SqliteRunStore

LIMITS = {
    "none": QuotaLimits(),
    "concurrent": QuotaLimits(concurrent_runs=1_000_000),
    "rpm": QuotaLimits(runs_per_minute=1_000_000),
    "day": QuotaLimits(tokens_per_day=10**15, cost_usd_per_day=1e9),
    "all": QuotaLimits(1_000_000, 1_000_000, 10**15, 1e9),
}
KEY = "k" * 32


def record() -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": new_run_id(),
            "owner": KEY,
            "request": {"task": "t"},
            "model": "m",
            "settings": {},
        }
    )


async def main(kind: str, quotas_set: str, n: int) -> None:
    store = SqliteRunStore(str(Path(tempfile.mkdtemp(prefix="finishline-quotas-")) / "q.db"))
    await store.open()
    quotas = None if quotas_set == "bare" else LocalQuotas(store, LIMITS[quotas_set])
    if kind == "admit":
        for _ in range(n):
            run = record()
            if quotas is None:
                await store.create(run)
                continue
            async with quotas.admit(KEY, run.id) as share:
                await store.create(run)
                share.made()
    else:
        run = record()
        await store.create(run)
        data = {"model": "m", "prompt_tokens": 100, "completion_tokens": 10, "cost_usd": 0.001}
        call = DayUsage(llm_calls=1, prompt_tokens=100, completion_tokens=10, cost_usd=0.001)
        for step in range(n):
            queued = [await store.append_soon(run.id, EventType.LLM_CALL, step, data)]
            if quotas is not None:
                queued.append(await quotas.spend(KEY, call))
            for outcome in queued:  # the recorder settles at the step's checkpoint
                await outcome
    await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
