"""The cluster queue's rows on Postgres (`PostgresCoordinator`'s): what a queued run is, the
places POSTs being admitted hold (`queue_places`), and the writes that admission, holds and
releases make, several of one batch in one statement where they can; the statements of the
leases and of the webhook outbox."""

from __future__ import annotations

from typing import NamedTuple

from app.runs.stores.postgres_rows import NOW_S, Conn

ADMIT_HOLD_S = 30.0  # a place taken in the queue by a POST whose replica died meanwhile
QUEUED = f"status = 'queued' AND queued_at IS NOT NULL AND held_behind IS NULL AND (lease_token IS NULL OR lease_until < {NOW_S})"  # noqa: E501
PLACES = "queue_places"
"""What admission writes touch (`PostgresWriter.submit`): no run's rows; it counts queued
runs, which no write made together (appends, checkpoints, usage) changes."""
HELD = "held runs"
"""What holds and releases of held runs touch (`PostgresWriter.submit`): made in the order
asked, so a release never comes before a hold asked before it (its run would stay held)."""
RING_QUEUE = "pg_notify(%s, 'q:')"
"""The queue's doorbell, rung by a statement that queues a run (once per transaction)."""
RESERVE = (
    # a place of a POST whose replica died (older than ADMIT_HOLD_S) is dropped, not counted
    "WITH d AS (DELETE FROM queue_places WHERE at < " + NOW_S + " - %s),"
    " n AS (SELECT (SELECT COUNT(*) FROM runs WHERE " + QUEUED + ")"
    " + (SELECT COUNT(*) FROM queue_places WHERE at >= " + NOW_S + " - %s)"
    " + (SELECT COUNT(*) FROM runs WHERE held_behind IS NOT NULL) AS queued),"
    " i AS (INSERT INTO queue_places (ticket, at) SELECT %s, " + NOW_S + " FROM n"
    " WHERE NOT (n.queued >= %s AND (n.queued > 0 OR %s)) RETURNING 1)"
    " SELECT n.queued, EXISTS (SELECT 1 FROM i) FROM n"
)
"""The cluster's queue counted (queued runs, places taken by POSTs being admitted, held
runs) and a place taken unless it is full: `queued >= cap`, and a run would wait (some are
queued, or this replica is busy)."""
TAKE = (
    "UPDATE runs SET lease_owner = %s, lease_token = %s || id, lease_until = " + NOW_S + " + %s"
    " WHERE id IN (SELECT id FROM runs WHERE " + QUEUED + " ORDER BY queued_at LIMIT %s"
    " FOR UPDATE SKIP LOCKED) RETURNING id, lease_token, owner, record, cancel_requested"
)
RENEW = (
    "UPDATE runs r SET lease_until = " + NOW_S + " + %s FROM unnest(%b::text[], %b::text[])"
    " AS h(id, token) WHERE r.id = h.id AND r.lease_token = h.token"
    " AND r.lease_until >= " + NOW_S + " RETURNING r.id"
)
"""A replica's leases renewed, all in one statement; those still its own answered."""
TAKE_OVER = (
    "UPDATE runs SET lease_owner = %s, lease_token = %s, lease_until = " + NOW_S + " + %s,"
    " attempts = attempts + 1 WHERE id = (SELECT id FROM runs WHERE status = 'running'"
    " AND (lease_token IS NULL OR lease_until < " + NOW_S + ") AND NOT (id = ANY(%s))"
    " ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, attempts"
)
"""One running run whose lease lapsed taken, but for the runs named (the replica's own)."""
STALE_HOLDS = (
    "SELECT h.held_behind FROM runs h LEFT JOIN runs b ON b.id = h.held_behind"
    " WHERE h.held_behind IS NOT NULL AND (b.id IS NULL"
    " OR b.status NOT IN ('queued', 'running', 'requires_action'))"
)
"""The runs that runs are held behind and that ended (or are gone): to be released."""
STRANDED = (
    "UPDATE runs SET queued_at = " + NOW_S + " WHERE id IN (SELECT id FROM runs"
    " WHERE status = 'queued' AND queued_at IS NULL AND held_behind IS NULL"
    " AND lease_token IS NULL AND created_at::timestamptz < now() - make_interval(secs => %s)"
    " FOR UPDATE SKIP LOCKED) RETURNING id, " + RING_QUEUE
)
"""Runs made queued but neither queued nor held for longer than a POST takes: the POST that
made them did not queue them (its replica died, or Postgres went away, between the two
writes; the client was not answered 201). Put in the queue, they run."""
CLAIM = (
    "UPDATE runs SET lease_owner = %s, lease_token = %s, lease_until = " + NOW_S + " + %s"
    " WHERE id = %s AND (lease_token IS NULL OR lease_until < " + NOW_S + ") RETURNING 1"
)


async def release_many(conn: Conn, held: list[tuple[str, str]]) -> list[list[str]]:
    """For each (run, the store's channel), the runs held behind that run, put in the queue
    (the replicas told), in one statement."""
    behind = [run_id for run_id, _channel in held]
    cur = await conn.execute(
        f"WITH r AS (UPDATE runs SET held_behind = NULL, queued_at = {NOW_S}"
        " WHERE held_behind = ANY(%b) RETURNING id, held_behind)"
        f" SELECT r.id, r.held_behind, {RING_QUEUE} FROM r",
        (behind, held[0][1]),
    )
    released: dict[str, list[str]] = {}
    for run_id, held_behind, _ in await cur.fetchall():
        released.setdefault(str(held_behind), []).append(str(run_id))
    return [released.get(run_id, []) for run_id in behind]


async def unreserve_many(conn: Conn, tickets: list[str]) -> list[None]:
    """The places of a batch's admissions given back in one statement."""
    await conn.execute("DELETE FROM queue_places WHERE ticket = ANY(%b)", (tickets,))
    return [None] * len(tickets)


class Enqueue(NamedTuple):
    """One run to queue, the place its POST holds ("" for none), the store's channel."""

    run_id: str
    place: str
    channel: str


async def enqueue_many(conn: Conn, queued: list[Enqueue]) -> list[None]:
    """The runs in the queue and their POSTs' places given back, in one statement (the
    count never sees a run twice, nor misses it; one doorbell: Postgres sends a
    transaction's equal notifications once)."""
    await conn.execute(
        "WITH d AS (DELETE FROM queue_places WHERE ticket = ANY(%b::text[]))"
        f" UPDATE runs SET queued_at = {NOW_S} WHERE id = ANY(%b) RETURNING {RING_QUEUE}",
        ([q.place for q in queued if q.place], [q.run_id for q in queued], queued[0].channel),
    )
    return [None] * len(queued)


class Reserve(NamedTuple):
    """One admission's ask for a place: its ticket, the cap, whether its replica is busy,
    and the store's channel (the advisory lock's name)."""

    ticket: str
    cap: int
    busy: bool
    channel: str


COUNT = (
    "WITH d AS (DELETE FROM queue_places WHERE at < " + NOW_S + " - %s)"
    " SELECT (SELECT COUNT(*) FROM runs WHERE " + QUEUED + ")"
    " + (SELECT COUNT(*) FROM queue_places WHERE at >= " + NOW_S + " - %s)"
    " + (SELECT COUNT(*) FROM runs WHERE held_behind IS NOT NULL)"
)
"""`RESERVE`'s count alone (stale places dropped), for `reserve_many`."""


async def reserve_many(conn: Conn, asks: list[Reserve]) -> list[tuple[str | None, int]]:
    """The admissions of a batch, in the order asked, as `RESERVE` makes one: under one lock,
    one count; each takes a place unless the queue is full then, and counts for the next."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (asks[0].channel,))
    row = await (await conn.execute(COUNT, (ADMIT_HOLD_S, ADMIT_HOLD_S))).fetchone()
    queued = int(row[0]) if row is not None else 0
    results: list[tuple[str | None, int]] = []
    for ask in asks:
        taken = not (queued >= ask.cap and (queued > 0 or ask.busy))
        results.append((ask.ticket if taken else None, queued))
        queued += taken
    tickets = [ticket for ticket, _ in results if ticket is not None]
    if tickets:
        await conn.execute(
            f"INSERT INTO queue_places (ticket, at) SELECT t, {NOW_S} FROM unnest(%b::text[]) t",
            (tickets,),
        )
    return results


WEBHOOKS_TAKE = (
    "UPDATE runs SET webhook_owner = %s, webhook_until = " + NOW_S + " + %s WHERE id IN"
    " (SELECT id FROM runs WHERE webhook_due AND (webhook_until IS NULL"
    " OR webhook_until < " + NOW_S + ") LIMIT 10 FOR UPDATE SKIP LOCKED) RETURNING id"
)
"""Up to 10 webhooks due taken for delivery (a delivery lease), none another replica holds."""
WEBHOOK_HOLD = (
    "UPDATE runs SET webhook_until = " + NOW_S + " + %s"
    " WHERE id = %s AND webhook_owner = %s AND webhook_due RETURNING 1"
)
WEBHOOK_DONE = (
    "UPDATE runs SET webhook_due = FALSE, webhook_until = NULL"
    " WHERE id = %s AND webhook_owner = %s RETURNING 1"
)
