"""The replica side of the `Quotas` seam on Postgres (DESIGN §13): every replica checks and
takes a key's quotas in one transaction under an advisory lock of the key
(`pg_advisory_xact_lock`), so POSTs racing on any replicas never pass a quota together.

A key's unended runs are its rows in those statuses (the `runs_by_owner_status` index) plus
the tickets of runs past the check and not yet stored (`key_admitting`, dropped once the run
is stored, or after `HOLD_S` when the replica admitting it died meanwhile); a ticket is its
run's id, so a run stored and not yet let go is counted once. The counts are the store's
(`PostgresCounters`). Times are the replicas' clocks, which NTP keeps together.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import structlog

from app.engine.ports import Allowance, Allowances
from app.runs.errors import StoreUnavailableError
from app.runs.quotas.seam import (
    UNENDED,
    WINDOW_S,
    KeyUsage,
    QuotaLimits,
    QuotaTicket,
    allowance_of,
    refusal,
    utc_day,
)
from app.runs.records import RunRecord
from app.runs.store import DayUsage, StoreError
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_rows import Conn

log = structlog.get_logger("finishline.runs")

HOLD_S = 30.0
"""How long a ticket of a run being admitted counts at most (its replica may have died)."""
_DAY = (
    "SELECT runs, llm_calls, unpriced_calls, prompt_tokens, completion_tokens, cost_usd"
    " FROM key_days WHERE owner = %s AND day = %s"
)
_ADD_RUNS = (
    "INSERT INTO key_days (owner, day, runs) VALUES (%s, %s, %s)"
    " ON CONFLICT (owner, day) DO UPDATE SET runs = key_days.runs + excluded.runs"
)


class PostgresQuotas:
    def __init__(
        self,
        store: PostgresRunStore,
        limits: QuotaLimits,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.counters = store.counters
        self.limits = limits
        self.clock = clock
        self._days: dict[str | None, tuple[str, DayUsage]] = {}

    def admit(self, owner: str | None, run_id: str) -> AbstractAsyncContextManager[QuotaTicket]:
        return self._admit(owner, run_id)

    @asynccontextmanager
    async def _admit(self, owner: str | None, run_id: str) -> AsyncIterator[QuotaTicket]:
        limits, now = self.limits, self.clock()
        day, ticket, key = utc_day(now), QuotaTicket(run_id), owner or ""

        async def take(conn: Conn) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("quota:" + key,))
            held = 0
            if limits.concurrent_runs is not None:
                sql = "DELETE FROM key_admitting WHERE owner = %s AND at <= %s"
                await conn.execute(sql, (key, now - HOLD_S))
                where = "owner IS NULL" if owner is None else "owner = %s"
                cur = await conn.execute(
                    f"SELECT (SELECT COUNT(*) FROM runs WHERE {where} AND status = ANY(%s))"
                    " + (SELECT COUNT(*) FROM key_admitting a WHERE a.owner = %s"
                    " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = a.ticket))",
                    (*(() if owner is None else (owner,)), [s.value for s in UNENDED], key),
                )
                row = await cur.fetchone()
                held = int(row[0]) if row is not None else 0
            starts: deque[float] = deque()
            if limits.runs_per_minute is not None:
                sql = "DELETE FROM key_admissions WHERE owner = %s AND at <= %s"
                await conn.execute(sql, (key, now - WINDOW_S))
                sql = "SELECT at FROM key_admissions WHERE owner = %s ORDER BY at"
                starts.extend(at for (at,) in await (await conn.execute(sql, (key,))).fetchall())
            found = await (await conn.execute(_DAY, (key, day))).fetchone()
            used = DayUsage(*found) if found is not None else DayUsage()
            refused = refusal(limits, held=held, starts=starts, used=used, now=now)
            if refused is not None:
                raise refused  # the transaction rolls back: nothing taken
            if limits.concurrent_runs is not None:
                sql = "INSERT INTO key_admitting (owner, ticket, at) VALUES (%s, %s, %s)"
                await conn.execute(sql + " ON CONFLICT DO NOTHING", (key, run_id, now))
            if limits.runs_per_minute is not None:
                sql = "INSERT INTO key_admissions (owner, ticket, at) VALUES (%s, %s, %s)"
                await conn.execute(sql + " ON CONFLICT DO NOTHING", (key, run_id, now))
            await conn.execute(_ADD_RUNS, (key, day, 1))

        unbounded = limits.concurrent_runs is None and limits.runs_per_minute is None
        counted: Awaitable[None] | None = None
        if unbounded and not limits.day_bounded:  # nothing to check: the run is counted, made
            # with the batch's other usage adds; not awaited here: the admission's next write
            # (its queue place) is queued after it and awaited, so it is made by then
            counted = await self.counters.add_usage(owner, day, DayUsage(runs=1))
        else:  # (reads the key's usage: made after the adds queued before it)
            await self.store.submit(take, touches=f"key_days {key}")
        try:
            yield ticket
        finally:
            if counted is None or await _counted(counted, key):
                await self._release(key, day, ticket)

    async def _release(self, key: str, day: str, ticket: QuotaTicket) -> None:
        """The run is stored (counted by its row now) or was not made (its share given
        back). A failure here fails no request: a ticket left behind counts `HOLD_S` at most."""
        if ticket.stored and self.limits.concurrent_runs is None:
            return

        async def release(conn: Conn) -> None:
            sql = "DELETE FROM key_admitting WHERE owner = %s AND ticket = %s"
            await conn.execute(sql, (key, ticket.run_id))
            if not ticket.stored:
                sql = "DELETE FROM key_admissions WHERE owner = %s AND ticket = %s"
                await conn.execute(sql, (key, ticket.run_id))
                await conn.execute(_ADD_RUNS, (key, day, -1))

        try:
            await self.store.submit(release)
        except (StoreError, StoreUnavailableError) as exc:
            log.warning("quota_ticket_not_released", made=ticket.stored, error=str(exc))

    def ended(self, record: RunRecord) -> None:
        return None  # its row's status says so

    async def spend(self, owner: str | None, call: DayUsage) -> Awaitable[None]:
        day = utc_day(self.clock())
        known = self._days.get(owner)
        if known is not None and known[0] == day:
            self._days[owner] = (day, known[1] + call)
        return await self.counters.add_usage(owner, day, call)

    async def allowance(self, owner: str | None) -> Allowances | None:
        if not self.limits.day_bounded:
            return None
        day = utc_day(self.clock())
        self._days[owner] = (day, await self.counters.day_usage(owner, day))

        def left() -> Allowance:
            known_day, used = self._days[owner]
            if known_day != utc_day(self.clock()):
                used = DayUsage()  # a new day: until a call here reads it
            return allowance_of(self.limits, used)

        return left

    async def usage(self, owner: str | None) -> KeyUsage:
        now = self.clock()
        day = utc_day(now)
        used = await self.counters.day_usage(owner, day)
        recent = await self.counters.admissions_since(owner, now - WINDOW_S)
        active = await self.counters.active_runs(owner)
        return KeyUsage(day, used, active, len(recent), self.limits)


async def _counted(counted: Awaitable[None], key: str) -> bool:
    """Whether the run was counted in its key's day (else there is nothing to give back)."""
    try:
        await counted
    except Exception as exc:  # Postgres away: the admission's other writes failed with it
        log.warning("run_not_counted", key=key or None, error=str(exc))
        return False
    return True
