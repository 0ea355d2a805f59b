"""`Inbox` on Redis, the replica side (`app.runs.inbox` has the one-process one): a run's
undelivered steering messages are one list, and one pub/sub channel tells the replicas a run
has new ones (DESIGN §10 with §8).

Keys (P is the store's prefix):
    P inbox:{id}         list: the run's messages not yet taken by its executing replica
    P inbox-closed:{id}  set once the run took its last message (it is ending): no more
    channel P messages   carries the id of a run that was sent a message

`post` is one script: refused when the run has ended (its status, or the closed flag) or
holds `max_pending` messages already; else pushed and announced. The replica executing the
run takes the list (`pull`) when told, when it starts or resumes the run, and each time its
subscription (re)starts (a notification lost while it was down is caught up). A replica that
lost the run's lease takes nothing: its fencing token is checked in the same script.
Messages a replica took and had not yet handed to the model when it died are lost with it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog
from redis.exceptions import RedisError

from app.runs.errors import RunAlreadyEndedError, TooManyMessagesError
from app.runs.inbox import RunLocks, already_ended
from app.runs.live import ActiveRun, LiveRuns
from app.runs.records import RunRecord
from app.runs.store import LeaseLostError
from app.runs.stores.redis_errors import cancelling, translated, waited_out
from app.runs.stores.redis_store import RedisRunStore

log = structlog.get_logger("finishline.runs")

LISTEN_S = 1.0

# ARGV: prefix, id, content, max_pending, ttl_ms -> "ok", "ended", or the count held (full)
POST = """
local P, id = ARGV[1], ARGV[2]
local status = redis.call('HGET', P .. 'run:' .. id, 'status')
if status ~= 'queued' and status ~= 'running' and status ~= 'requires_action' then
  return 'ended'
end
if redis.call('EXISTS', P .. 'inbox-closed:' .. id) == 1 then return 'ended' end
local key = P .. 'inbox:' .. id
local held = redis.call('LLEN', key)
if held >= tonumber(ARGV[4]) then return held end
redis.call('RPUSH', key, ARGV[3])
redis.call('PEXPIRE', key, ARGV[5])
redis.call('PUBLISH', P .. 'messages', id)
return 'ok'
"""

# ARGV: prefix, id, fence ("" for none), close ("1": take the last ones), ttl_ms
# -> the messages taken, oldest first, or "fenced"
TAKE = """
local P, id = ARGV[1], ARGV[2]
if ARGV[3] ~= '' and redis.call('GET', P .. 'owner:' .. id) ~= ARGV[3] then return 'fenced' end
if ARGV[4] == '1' then redis.call('SET', P .. 'inbox-closed:' .. id, '1', 'PX', ARGV[5]) end
local key = P .. 'inbox:' .. id
local taken = redis.call('LRANGE', key, 0, -1)
redis.call('DEL', key)
return taken
"""


@translated
class RedisInbox:
    def __init__(self, store: RedisRunStore, *, live: LiveRuns, max_pending: int) -> None:
        self.store = store
        self.live = live
        self.redis = store.redis
        self.max_pending = max_pending
        self.channel = store.prefix + "messages"
        self._ttl_ms = max(1, int(store.retention_s * 1000))
        self._post = self.redis.register_script(POST)
        self._take = self.redis.register_script(TAKE)
        self._locks = RunLocks()

    async def post(self, record: RunRecord, content: str) -> RunRecord:
        """Stored for the run wherever it is; moved to it at once if it executes here."""
        if record.status.terminal:
            raise already_ended(record.id, record.status.value)
        await self._store(record.id, content)
        log.info("user_message_queued", run_id=record.id, chars=len(content))
        active = self.live.get(record.id)
        if active is None:  # queued, waiting, or running on another replica
            return await self.store.get(record.id) or record
        await self.pull(active)
        return active.record

    async def _store(self, run_id: str, content: str) -> None:
        args: list[str | int] = [self.store.prefix, run_id, content, self.max_pending]
        args.append(self._ttl_ms)
        outcome = await self._post(args=args)
        if outcome == "ended":
            raise RunAlreadyEndedError(
                f"run {run_id!r} has ended: start a follow-up with previous_run_id instead",
                run_id=run_id,
            )
        if outcome != "ok":
            raise TooManyMessagesError(
                f"run {run_id!r} already holds {outcome} undelivered messages",
                run_id=run_id,
                cap=self.max_pending,
            )

    async def pull(self, active: ActiveRun) -> None:
        """A failed read leaves the messages stored, for the next notification or start; a
        replica that lost the run's lease takes none (they are its new owner's). A run's
        pulls here are one at a time (`RunLocks`), so order holds."""
        if active.inbox_closed:
            return
        run_id = active.record.id
        async with self._locks.held(run_id):
            try:
                taken = await self._taken(run_id, close=False)
            except (RedisError, LeaseLostError) as exc:
                if cancelling():
                    raise asyncio.CancelledError from exc
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
        args = [self.store.prefix, run_id, fence, "1" if close else "", self._ttl_ms]
        reply: Any = await self._take(args=args)
        if reply == "fenced":
            raise LeaseLostError(f"run {run_id!r} was taken over by another replica")
        return [str(content) for content in reply]

    async def listen(self) -> None:
        """`P messages` carries the id of a run that was sent messages: if it executes here,
        it takes them. Each time the subscription (re)starts, every run here looks (a
        notification may have been missed while it was down)."""
        while True:
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.channel)
                await self._told(None)
                while True:
                    message = await pubsub.get_message(timeout=LISTEN_S)
                    if message is not None and message.get("type") == "message":
                        await self._told(str(message["data"]))
            except RedisError as exc:
                await waited_out(exc, "message_channel_failed", self.redis)
            finally:
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _told(self, run_id: str | None) -> None:
        """Told that a run (None: any run) was sent messages: those executing here take them."""
        try:
            if run_id is None:
                runs = self.live.all()
            else:
                found = self.live.get(run_id)
                runs = [found] if found is not None else []
            for active in runs:
                await self.pull(active)
        except Exception:  # the one listener of this replica: it must not stop
            log.exception("user_message_notice_failed", run_id=run_id)
