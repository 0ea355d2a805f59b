"""Runs a POST made but did not queue, on Redis (`RedisCoordinator`'s sweep).

A POST stores the run (`queued`, with its `run.queued`), then adds it to the queue stream: two
writes. A replica that dies between them, or a Redis that goes away, leaves the run `queued`
in its record and in no queue (its client got no 201, but a retry with its Idempotency-Key is
answered that run); so does a replica that claimed a run (its lease key set, the stream entry
acknowledged) and died before saving it running, once the lease key expires. The sweep finds
such runs among those made more than a POST takes ago (run ids sort by time): `queued` still,
in no entry of the queue stream, held behind no run, with no lease key."""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis

from app.runs.records import run_id_at


async def stranded(redis: Redis, prefix: str, older_than_s: float) -> list[str]:
    """The runs made before `older_than_s` ago that should be queued and are not (keys:
    `redis_cluster`'s, `P queue` and `P held`)."""
    queue_key, held_key = prefix + "queue", prefix + "held"
    before = run_id_at(time.time() - older_than_s)
    found: Any = await redis.zrangebylex(prefix + "idx:all|queued", "-", "(" + before)
    if not found:
        return []
    entries: Any = await redis.xrange(queue_key)
    in_queue = {fields.get("run") for _, fields in entries}
    held = set(await redis.hvals(held_key))
    run_ids = [str(i) for i in found if str(i) not in in_queue and str(i) not in held]
    async with redis.pipeline(transaction=False) as pipe:
        for run_id in run_ids:
            pipe.exists(prefix + "owner:" + run_id)
            pipe.hget(prefix + "run:" + run_id, "status")
        answers: list[Any] = await pipe.execute()
    leased, statuses = answers[::2], answers[1::2]
    return [
        run_id
        for run_id, lease, status in zip(run_ids, leased, statuses, strict=True)
        if not lease and status == "queued"  # (the index may lag the record)
    ]
