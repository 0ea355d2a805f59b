"""`Inbox` on Postgres, the replica side (`app.runs.inbox` has the one-process one): a run's
undelivered steering messages are rows of `run_messages`, in order by `pos`, and a
notification `m:<id>` on the store's channel tells the replicas a run has new ones
(DESIGN §10 with §8, §18).

`post` is one transaction on the run's row (locked): refused when the run has ended (its
status, or `inbox_closed`) or holds `max_pending` messages already; else inserted and
announced. The replica executing the run takes them (`pull`) when told, when it starts or
resumes the run, and each time its listener reconnects (every run here looks). A replica
that lost the run's lease takes nothing: the fencing token is checked in the same statement.
The takes the writer finds queued together, of many runs, are one statement (`take_many`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple

import structlog

from app.runs.errors import RunAlreadyEndedError, TooManyMessagesError
from app.runs.inbox import RunLocks, already_ended
from app.runs.live import ActiveRun, LiveRuns
from app.runs.records import RunRecord
from app.runs.store import LeaseLostError, StoreError
from app.runs.stores.postgres import PostgresRunStore
from app.runs.stores.postgres_appends import why_refused
from app.runs.stores.postgres_errors import is_outage
from app.runs.stores.postgres_rows import NOW_S, Conn, Write, refused
from app.runs.stores.postgres_writer import Failed

log = structlog.get_logger("finishline.runs")

_TAKE = (
    "WITH r AS (SELECT id FROM runs WHERE id = %s AND (%s = '' OR (lease_token = %s"
    " AND lease_until >= " + NOW_S + ")) FOR UPDATE),"
    " c AS (UPDATE runs SET inbox_closed = TRUE FROM r WHERE runs.id = r.id AND %s),"
    " d AS (DELETE FROM run_messages m USING r WHERE m.run_id = r.id RETURNING m.pos, m.content)"
    " SELECT d.pos, d.content FROM r LEFT JOIN d ON TRUE"
)
"""A run's messages taken (and its inbox closed, if asked) in one statement, unless its lease
is another replica's or it is gone (no row at all); a row of NULLs when it has none."""
_TAKE_MANY = (
    "WITH a AS (SELECT * FROM unnest(%b::text[], %b::text[], %b::bool[]) AS a (id, fence, close)),"
    " r AS (SELECT a.* FROM a JOIN runs ON runs.id = a.id AND (a.fence = ''"
    " OR (runs.lease_token = a.fence AND runs.lease_until >= " + NOW_S + ")) FOR UPDATE OF runs),"
    " c AS (UPDATE runs SET inbox_closed = TRUE FROM r WHERE runs.id = r.id AND r.close),"
    " d AS (DELETE FROM run_messages m USING r WHERE m.run_id = r.id"
    " RETURNING m.run_id, m.pos, m.content)"
    " SELECT r.id, d.pos, d.content FROM r LEFT JOIN d ON d.run_id = r.id"
)
"""`_TAKE` for the takes of several runs the writer found queued together."""


class Take(NamedTuple):
    """One queued take: its run, the lease token it names ("" for none), and whether it
    closes the run's inbox."""

    run_id: str
    fence: str
    close: bool


async def take_many(conn: Conn, takes: Sequence[Take]) -> list[list[str] | Failed]:
    """The messages of each take's run, in order (a statement for each stretch in which no
    run comes twice); or why a fenced take was refused (an unfenced take of a run gone: none).
    """
    results: list[list[str] | Failed] = []
    start = 0
    while start < len(takes):
        runs: set[str] = set()
        end = start
        while end < len(takes) and takes[end].run_id not in runs:
            runs.add(takes[end].run_id)
            end += 1
        results += await _take(conn, takes[start:end])
        start = end
    return results


async def _take(conn: Conn, takes: Sequence[Take]) -> list[list[str] | Failed]:
    columns = ([t.run_id for t in takes], [t.fence for t in takes], [t.close for t in takes])
    cur = await conn.execute(_TAKE_MANY, columns)
    taken: dict[str, list[tuple[int, str]]] = {}
    for run_id, pos, content in await cur.fetchall():
        kept = taken.setdefault(run_id, [])
        if content is not None:
            kept.append((pos, content))
    results: list[list[str] | Failed] = []
    for take in takes:
        if take.run_id in taken:
            results.append([content for _pos, content in sorted(taken[take.run_id])])
        elif take.fence:
            results.append(Failed(await why_refused(conn, take.run_id)))
        else:
            results.append([])
    return results


async def insert_messages(conn: Conn, run_id: str, contents: list[str], *, front: bool) -> None:
    """Add messages to the run's inbox, at its end or (held ones given back) its front."""
    if not contents:
        return
    edge = "COALESCE(MIN(pos), 0) - %s" if front else "COALESCE(MAX(pos), 0) + 1"
    start_sql = f"SELECT {edge} FROM run_messages WHERE run_id = %s"
    params = (len(contents), run_id) if front else (run_id,)
    row = await (await conn.execute(start_sql, params)).fetchone()
    start = int(row[0]) if row is not None else 0
    async with conn.cursor() as cur:
        await cur.executemany(
            "INSERT INTO run_messages (run_id, pos, content) VALUES (%s, %s, %s)",
            [(run_id, start + i, content) for i, content in enumerate(contents)],
        )


class PostgresInbox:
    def __init__(self, store: PostgresRunStore, *, live: LiveRuns, max_pending: int) -> None:
        self.store = store
        self.live = live
        self.max_pending = max_pending
        self._locks = RunLocks()
        self._told_runs: asyncio.Queue[str | None] = asyncio.Queue()
        store.follower.listeners.append(self._notified)
        store.follower.reconnected.append(lambda: self._told_runs.put_nowait(None))

    def _notified(self, payload: str) -> None:
        kind, _, run_id = payload.partition(":")
        if kind == "m" and run_id and self.live.get(run_id) is not None:
            self._told_runs.put_nowait(run_id)

    async def post(self, record: RunRecord, content: str) -> RunRecord:
        """Stored for the run wherever it is; moved to it at once if it executes here."""
        if record.status.terminal:
            raise already_ended(record.id, record.status.value)
        await self.store.submit(self._store(record.id, content))
        log.info("user_message_queued", run_id=record.id, chars=len(content))
        active = self.live.get(record.id)
        if active is None:  # queued, waiting, or running on another replica
            return await self.store.get(record.id) or record
        await self.pull(active)
        return active.record

    def _store(self, run_id: str, content: str) -> Write:
        channel, cap = self.store.channel, self.max_pending

        async def post(conn: Conn) -> None:
            cur = await conn.execute(
                "SELECT status, inbox_closed FROM runs WHERE id = %s FOR UPDATE", (run_id,)
            )
            row = await cur.fetchone()
            if row is None or row[1] or row[0] not in ("queued", "running", "requires_action"):
                raise RunAlreadyEndedError(
                    f"run {run_id!r} has ended: start a follow-up with previous_run_id instead",
                    run_id=run_id,
                )
            sql = "SELECT COUNT(*) FROM run_messages WHERE run_id = %s"
            held = await (await conn.execute(sql, (run_id,))).fetchone()
            count = int(held[0]) if held is not None else 0
            if count >= cap:
                raise TooManyMessagesError(
                    f"run {run_id!r} already holds {count} undelivered messages",
                    run_id=run_id,
                    cap=cap,
                )
            await insert_messages(conn, run_id, [content], front=False)
            await conn.execute("SELECT pg_notify(%s, %s)", (channel, "m:" + run_id))

        return post

    async def pull(self, active: ActiveRun) -> None:
        """A failed read leaves the messages stored, for the next notification or start; a
        replica that lost the run's lease takes none (they are its new owner's)."""
        if active.inbox_closed:
            return
        run_id = active.record.id
        async with self._locks.held(run_id):
            try:
                taken = await self._taken(run_id, close=False)
            except (StoreError, LeaseLostError) as exc:
                log.warning("user_messages_not_taken", run_id=run_id, error=str(exc))
                return
            except Exception as exc:
                if not is_outage(exc):
                    raise
                log.warning("user_messages_not_taken", run_id=run_id, error=str(exc))
                return
            if taken:
                active.inbox.extend(taken)
                log.info("user_messages_taken", run_id=run_id, count=len(taken))

    async def close(self, run_id: str) -> list[str]:
        async with self._locks.held(run_id):
            return await self._taken(run_id, close=True)

    async def _taken(self, run_id: str, *, close: bool) -> list[str]:
        fence = self.store.fence_of(run_id)

        async def take(conn: Conn) -> list[str]:
            cur = await conn.execute(_TAKE, (run_id, fence, fence, close))
            rows = await cur.fetchall()
            if not rows and fence:  # (unfenced: a run gone has no messages)
                await refused(conn, run_id)
            return [content for _pos, content in sorted(rows) if content is not None]

        item = Take(run_id, fence, close)
        many = (take_many, item)
        taken: list[str] = await self.store.queue(take, None, run_id, many, one_statement=True)
        return taken

    async def listen(self) -> None:
        """The store's listener hands over the runs here that were sent messages (and None,
        each time it reconnects: every run here looks)."""
        self._told_runs.put_nowait(None)
        while True:
            run_id = await self._told_runs.get()
            try:
                runs = self.live.all() if run_id is None else [self.live.get(run_id)]
                for active in runs:
                    if active is not None:
                        await self.pull(active)
            except Exception:  # the one listener of this replica: it must not stop
                log.exception("user_message_notice_failed", run_id=run_id)
