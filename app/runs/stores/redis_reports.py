"""`RedisRunStore`'s run summaries (DESIGN §20; `app.runs.reports.summaries`): what its SAVE script
is given to write a terminal run's summary (completed there with the tally its APPEND
script counted), the termination report (the window's ids from `P sum:{scope}`, then their
summaries, summed by `ReportBuilder`), and the backfill's reads and writes.

A summary lives in its run's hash, so it expires and is deleted with the run; an id left
in `P sum:*` by an expired run is dropped when a report meets it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from app.runs.errors import RunUnreadableError
from app.runs.records import RunRecord, RunStatus
from app.runs.reports.groups import GroupBy, ReportBuilder
from app.runs.reports.summaries import RunFilter, RunSummary, micros, summarize
from app.runs.store import read_record
from app.runs.stores.redis_scripts import SAVE_SUMMARY, owner_tag, tag_owner

PAGE = 1000
ENDED = [s.value for s in RunStatus if s.terminal]


def summary_args(record: RunRecord) -> list[str | int]:
    """SAVE's `summary` and `score` for this record: a terminal one's summary without its
    tally (the script adds it), else nothing."""
    if not record.status.terminal:
        return ["", 0]
    summary = summarize(record)
    return [summary.to_json(tally=False), summary.score]


class RedisSummaries:
    """`RedisRunStore`'s part of the `RunStore` protocol about summaries (a mixin: the store
    has `redis` and `prefix`)."""

    redis: Redis
    prefix: str
    retention_s: float

    _record_args: Callable[[RunRecord], list[str]]  # the store's

    def save_args(self, record: RunRecord, fence: str) -> list[str | int]:
        """SAVE's arguments for `record` (`redis_scripts`): a terminal one's expiry, its
        webhook's outbox, and its summary (`summary_args`)."""
        ttl_ms = int(self.retention_s * 1000) if record.status.terminal else 0
        outbox = "1" if record.webhook is not None else ""
        return [*self._record_args(record), ttl_ms, fence, outbox, *summary_args(record)]

    async def termination_report(
        self, *, owner: str | None, any_owner: bool, matching: RunFilter, group_by: GroupBy
    ) -> list[dict[str, Any]]:
        index = self.prefix + "sum:" + ("all" if any_owner else owner_tag(owner))
        low = micros(matching.since) if matching.since is not None else "-inf"
        high = f"({micros(matching.until)}" if matching.until is not None else "+inf"
        ids: list[str] = list(await self.redis.zrangebyscore(index, low, high))  # type: ignore[arg-type]
        report = ReportBuilder(group_by)
        for start in range(0, len(ids), PAGE):
            page = ids[start : start + PAGE]
            async with self.redis.pipeline(transaction=False) as pipe:
                for run_id in page:
                    pipe.hget(self.prefix + "run:" + run_id, "summary")
                found: list[str | None] = await pipe.execute()
            gone = [run_id for run_id, raw in zip(page, found, strict=True) if raw is None]
            for raw in found:
                if raw is None:
                    continue
                summary = RunSummary.from_json(raw)
                visible = any_owner or summary.owner == owner
                if visible and matching.admits(summary.created_at, summary.model, summary.agent):
                    report.add_summary(summary)
            if gone:  # expired with their runs (retention)
                await self.redis.zrem(index, *gone)
        return report.groups()

    async def unsummarized(
        self, limit: int, *, after: str | None = None
    ) -> list[tuple[str, RunRecord | None]]:
        found: list[tuple[str, RunRecord | None]] = []
        cursor = after
        while len(found) < limit:
            low = f"({cursor}" if cursor is not None else "-"
            async with self.redis.pipeline(transaction=False) as pipe:
                for status in ENDED:
                    index = f"{self.prefix}idx:all|{status}"
                    pipe.execute_command("ZRANGE", index, low, "+", "BYLEX", "LIMIT", 0, PAGE)
                pages: list[list[str]] = await pipe.execute()
            ids = sorted({i for page in pages for i in page})[:PAGE]
            if not ids:
                break
            async with self.redis.pipeline(transaction=False) as pipe:
                for run_id in ids:  # which have a summary: most, read without their records
                    pipe.hexists(self.prefix + "run:" + run_id, "summary")
                summarized: list[int] = await pipe.execute()
            missing = [i for i, done in zip(ids, summarized, strict=True) if not done]
            async with self.redis.pipeline(transaction=False) as pipe:
                for run_id in missing:
                    pipe.hmget(self.prefix + "run:" + run_id, ["record", "tag"])
                rows: list[list[str | None]] = await pipe.execute()
            for run_id, (raw, tag) in zip(missing, rows, strict=True):
                if raw is None or len(found) == limit:
                    continue
                try:
                    found.append((run_id, read_record(run_id, raw, owner=tag_owner(tag))))
                except RunUnreadableError:  # (logged by read_record)
                    found.append((run_id, None))
            if len(ids) < PAGE:
                break
            cursor = ids[-1]
        return found

    async def save_summary(self, summary: RunSummary) -> None:
        args: list[str | int] = [self.prefix, summary.run_id, summary.to_json(), summary.score]
        await self.redis.register_script(SAVE_SUMMARY)(args=args)  # (the backfill's: rare)
