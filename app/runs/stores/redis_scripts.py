"""The Lua scripts of the Redis store: every write that touches more than one key is one
script, so Redis runs it atomically (and writes it to the AOF as one unit). A crash can
therefore never leave an event without its seq counted, a record outside its indexes, or an
idempotency key without its run.

Keys (P is the store's prefix, `finishline:` by default):
    P run:{id}          hash: record (the RunRecord's JSON), status, tag (owner), idem (the
                        idempotency key's name or ""), seq (the last event's seq)
    P ev:{id}           stream: the run's events, entry id `0-{seq}`; fields t, ts, s, d
    P cp:{id}           string: the checkpoint's JSON {"version", "step", "state"}; in an
                        incremental checkpoint (`stores.checkpoints`) the state's
                        `messages` is their count
    P cpm:{id}          list: that checkpoint's messages in chunks, one JSON array each
    P owner:{id}        string: the fencing token of the replica holding the run's lease
                        (`redis_cluster`); the hash's `attempts` counts takeovers
    P idem:{tag}:{key}  string: the run id an (owner, idempotency key) names
    P idx:{scope}       sorted set of run ids, all scores 0, so ids sort (by time) in lex order;
    P idx:{scope}|{st}  scope is `all` or an owner tag, st a status
    P tl:{id}           hash: the run's tally (`app.runs.reports.summaries`), counted as events are
                        appended; its summary is the run hash's `summary` field, written by
                        the save that makes it terminal
    P sum:{scope}       sorted set of the ids of runs with a summary, scored by their
                        creation time in microseconds (`redis_reports`)

An owner tag is `n` for no owner, else `o{len}:{owner}`: the length makes every key built from
a tag unambiguous whatever the owner string holds. Keys are built inside the scripts from the
prefix, so the store needs one Redis primary (not Redis Cluster).
"""

from __future__ import annotations

_PRELUDE = """
local P = ARGV[1]
local function indexes(tag, status)
  return {P .. 'idx:all', P .. 'idx:all|' .. status, P .. 'idx:' .. tag,
          P .. 'idx:' .. tag .. '|' .. status}
end
-- a write of a replica that holds a run's lease names its fencing token: refused ("fenced")
-- once another replica has taken the run over
local function fenced(id, token)
  return token ~= '' and redis.call('GET', P .. 'owner:' .. id) ~= token
end
local function expire_with_run(run, key)
  local ttl = redis.call('PTTL', run)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
end
-- the tally counter an event adds one to (`app.runs.reports.summaries.tally_key`), or nil
local function tally(kind, data)
  if kind == 'llm.retry' then return 'retries' end
  if kind == 'run.recovered' then return 'takeovers' end
  if kind == 'intervention' then return 'intervention.' .. tostring(cjson.decode(data).kind) end
  if kind == 'observation' and cjson.decode(data).truncated == true then return 'truncations' end
  if kind == 'llm.call' and cjson.decode(data).cost_usd == cjson.null then
    return 'unpriced_calls'
  end
  return nil
end
-- a terminal run's summary (its JSON without `tally`), completed with its tally, kept with it
local function summarize(id, run, tag, summary, score)
  local counts = redis.call('HGETALL', P .. 'tl:' .. id)
  local parts = {}
  for i = 1, #counts, 2 do parts[#parts + 1] = '"' .. counts[i] .. '":' .. counts[i + 1] end
  local full = string.sub(summary, 1, -2) .. ',"tally":{' .. table.concat(parts, ',') .. '}}'
  redis.call('HSET', run, 'summary', full)
  redis.call('ZADD', P .. 'sum:all', score, id)
  redis.call('ZADD', P .. 'sum:' .. tag, score, id)
end
"""

# create(id, record, status, tag, idem key name ("" for none))
# -> "ok", "id" (the id exists) or "key" (the idempotency key is taken)
_CREATE_FUNCTION = """
local function create(id, record, status, tag, idem)
  local run = P .. 'run:' .. id
  if redis.call('EXISTS', run) == 1 then return 'id' end
  if idem ~= '' and not redis.call('SET', idem, id, 'NX') then return 'key' end
  redis.call('HSET', run, 'record', record, 'status', status, 'tag', tag, 'idem', idem, 'seq', 0)
  for _, index in ipairs(indexes(tag, status)) do redis.call('ZADD', index, 0, id) end
  return 'ok'
end
"""

# ARGV: prefix, id, record, status, tag, idem (as `create` above)
CREATE = (
    _PRELUDE
    + _CREATE_FUNCTION
    + """
return create(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
"""
)

# save(id, record, status, tag, idem key name, ttl_ms (0: keep for good), fence ("" for
# none), outbox ("1": the run has a webhook; when this save ends it, its id goes to the
# outbox stream `P webhooks` in the same step, so the webhook is owed whatever crashes next))
# summary (a terminal record's, `summarize` above; "" for none), score (its creation time, us))
# -> "ok", "key" (the idempotency key names another run) or "fenced"
_SAVE_FUNCTION = """
local function save(id, record, status, tag, idem, ttl, fence, outbox, summary, score)
  if fenced(id, fence) then return 'fenced' end
  local run = P .. 'run:' .. id
  local old = redis.call('HMGET', run, 'status', 'tag', 'idem')
  local old_idem = old[3] or ''
  if idem ~= old_idem and idem ~= '' then
    local holder = redis.call('GET', idem)
    if holder and holder ~= id then return 'key' end
    redis.call('SET', idem, id)
  end
  if old_idem ~= '' and old_idem ~= idem and redis.call('GET', old_idem) == id then
    redis.call('DEL', old_idem)
  end
  if old[1] then
    for _, index in ipairs(indexes(old[2], old[1])) do redis.call('ZREM', index, id) end
  end
  for _, index in ipairs(indexes(tag, status)) do redis.call('ZADD', index, 0, id) end
  local was_active = not old[1] or old[1] == 'queued' or old[1] == 'running'
    or old[1] == 'requires_action'
  if outbox == '1' and ttl > 0 and was_active then
    redis.call('XADD', P .. 'webhooks', '*', 'run', id)
  end
  redis.call('HSET', run, 'record', record, 'status', status, 'tag', tag, 'idem', idem)
  if not old[1] then redis.call('HSET', run, 'seq', 0) end
  if summary ~= '' then summarize(id, run, tag, summary, score) end
  local keys = {run, P .. 'ev:' .. id, P .. 'cp:' .. id, P .. 'cpm:' .. id, P .. 'tl:' .. id}
  if idem ~= '' then keys[6] = idem end
  for _, key in ipairs(keys) do
    if ttl > 0 then redis.call('PEXPIRE', key, ttl) else redis.call('PERSIST', key) end
  end
  return 'ok'
end
"""

# append(id, type, ts, step, data, fence) -> the new event's seq, nil for an unknown run, or
# "fenced"
_APPEND_FUNCTION = """
local function append(id, kind, ts, step, data, fence)
  local run = P .. 'run:' .. id
  if redis.call('EXISTS', run) == 0 then return nil end
  if fenced(id, fence) then return 'fenced' end
  local seq = redis.call('HINCRBY', run, 'seq', 1)
  local events = P .. 'ev:' .. id
  redis.call('XADD', events, '0-' .. seq, 't', kind, 'ts', ts, 's', step, 'd', data)
  expire_with_run(run, events)
  local counter = tally(kind, data)
  if counter then
    redis.call('HINCRBY', P .. 'tl:' .. id, counter, 1)
    expire_with_run(run, P .. 'tl:' .. id)
  end
  return seq
end
"""

# ARGV: prefix, id, record, status, tag, idem, ttl_ms, fence, outbox, summary, score (as
# `save` above)
SAVE = (
    _PRELUDE
    + _SAVE_FUNCTION
    + """
return save(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9],
            ARGV[10], ARGV[11])
"""
)

# ARGV: prefix, id, type, ts, step, data, fence (as `append` above)
APPEND = (
    _PRELUDE
    + _APPEND_FUNCTION
    + """
return append(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
"""
)

# A save and then an append of the same run, both or neither.
# ARGV: prefix, id, record, status, tag, idem, ttl_ms, fence, outbox, summary, score, type,
# ts, step, data -> save's outcome if it is not "ok" (nothing written), else append's
SAVE_APPEND = (
    _PRELUDE
    + _SAVE_FUNCTION
    + _APPEND_FUNCTION
    + """
local id, fence = ARGV[2], ARGV[8]
local saved = save(id, ARGV[3], ARGV[4], ARGV[5], ARGV[6], tonumber(ARGV[7]), fence, ARGV[9],
                   ARGV[10], ARGV[11])
if saved ~= 'ok' then return saved end
return append(id, ARGV[12], ARGV[13], ARGV[14], ARGV[15], fence)
"""
)

# ARGV: prefix, id, checkpoint JSON, fence, start ("0": drop the chunks first), chunk (a JSON
# array of the messages from index `start` on; "" for none) -> 1, nil for an unknown run, or
# "fenced"
CHECKPOINT = (
    _PRELUDE
    + """
local id = ARGV[2]
local run = P .. 'run:' .. id
if redis.call('EXISTS', run) == 0 then return nil end
if fenced(id, ARGV[4]) then return 'fenced' end
local key, list = P .. 'cp:' .. id, P .. 'cpm:' .. id
redis.call('SET', key, ARGV[3])
if ARGV[5] == '0' then redis.call('DEL', list) end
if ARGV[6] ~= '' then redis.call('RPUSH', list, ARGV[6]) end
expire_with_run(run, key)
expire_with_run(run, list)
return 1
"""
)

# ARGV: prefix, id -> 1 if the run existed, else 0
DELETE = (
    _PRELUDE
    + """
local id = ARGV[2]
local run = P .. 'run:' .. id
local old = redis.call('HMGET', run, 'status', 'tag', 'idem')
redis.call('DEL', run, P .. 'ev:' .. id, P .. 'cp:' .. id, P .. 'cpm:' .. id,
           P .. 'owner:' .. id, P .. 'cancel:' .. id, P .. 'tl:' .. id)
if not old[1] then return 0 end
redis.call('ZREM', P .. 'sum:all', id)
redis.call('ZREM', P .. 'sum:' .. old[2], id)
for _, index in ipairs(indexes(old[2], old[1])) do redis.call('ZREM', index, id) end
if old[3] and old[3] ~= '' and redis.call('GET', old[3]) == id then
  redis.call('DEL', old[3])
end
return 1
"""
)

# A summary made by the backfill (`RunStore.save_summary`), kept with its run unless the run is
# gone or has one already. ARGV: prefix, id, summary (whole), score -> 1 if kept, else 0
SAVE_SUMMARY = (
    _PRELUDE
    + """
local id = ARGV[2]
local run = P .. 'run:' .. id
if redis.call('EXISTS', run) == 0 or redis.call('HEXISTS', run, 'summary') == 1 then return 0 end
local tag = redis.call('HGET', run, 'tag')
redis.call('HSET', run, 'summary', ARGV[3])
redis.call('ZADD', P .. 'sum:all', ARGV[4], id)
redis.call('ZADD', P .. 'sum:' .. tag, ARGV[4], id)
return 1
"""
)

# ARGV: prefix, id, token, lease_ms -> the attempt (1 for the first takeover) if this caller
# took over the run (running, and nobody holds its lease), else 0
TAKE_OVER = (
    _PRELUDE
    + """
local id = ARGV[2]
local run = P .. 'run:' .. id
if redis.call('HGET', run, 'status') ~= 'running' then return 0 end
if not redis.call('SET', P .. 'owner:' .. id, ARGV[3], 'NX', 'PX', ARGV[4]) then return 0 end
return redis.call('HINCRBY', run, 'attempts', 1)
"""
)

# ARGV: prefix, id, token, lease_ms -> 1 if the lease is still this token's (renewed), else 0
RENEW = (
    _PRELUDE
    + """
local key = P .. 'owner:' .. ARGV[2]
if redis.call('GET', key) ~= ARGV[3] then return 0 end
redis.call('PEXPIRE', key, ARGV[4])
return 1
"""
)

# The cluster queue's cap, checked and taken in one step (`RedisCoordinator.reserve`): a POST
# holds a place in the sorted set `P admitting` (score: when, ms) from this check until its
# run is in the queue stream; places older than `hold_ms` (their replica died between) are
# dropped first. Queued = the stream's length + the places held + the runs held behind
# another (`P held`, DESIGN §19).
# ARGV: prefix, ticket, cap, busy ("1": the asking replica has no free slot), hold_ms
# -> {1, queued before} if a place was taken, else {0, queued}
RESERVE = """
local P = ARGV[1]
local admitting, queue = P .. 'admitting', P .. 'queue'
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', admitting, '-inf', now_ms - tonumber(ARGV[5]))
local queued = redis.call('XLEN', queue) + redis.call('ZCARD', admitting)
  + redis.call('HLEN', P .. 'held')
if queued >= tonumber(ARGV[3]) and (queued > 0 or ARGV[4] == '1') then
  return {0, queued}
end
redis.call('ZADD', admitting, now_ms, ARGV[2])
return {1, queued}
"""

# A webhook outbox entry's delivery lease (`RedisCoordinator._hold_entry`): the replica
# delivering it claims it again, resetting its idle time, only while it is still the entry's
# consumer (a replica paused past the lease must not take it back from the one redelivering).
# ARGV: stream, group, consumer, entry id -> 1 if held, 0 if the entry is not this consumer's
HOLD_ENTRY = """
local stream, group, consumer, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local pending = redis.call('XPENDING', stream, group, id, id, 1)
if #pending == 0 or pending[1][2] ~= consumer then return 0 end
redis.call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
return 1
"""

# A create and then the new run's first append, both or neither.
# ARGV: prefix, id, record, status, tag, idem, type, ts, step, data
# -> create's outcome if it is not "ok" (nothing written), else append's (the seq, 1)
CREATE_APPEND = (
    _PRELUDE
    + _CREATE_FUNCTION
    + _APPEND_FUNCTION
    + """
local id = ARGV[2]
local created = create(id, ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if created ~= 'ok' then return created end
return append(id, ARGV[7], ARGV[8], ARGV[9], ARGV[10], '')
"""
)

# A run held behind another (a thread's run enqueued behind the thread's latest, DESIGN §19),
# released into the queue once: the hash `P held` maps the run waited for to the held run.
# ARGV: prefix, the run waited for -> the held run's id, or nil (none, or released already)
RELEASE_HELD = """
local P = ARGV[1]
local held = redis.call('HGET', P .. 'held', ARGV[2])
if not held then return nil end
redis.call('HDEL', P .. 'held', ARGV[2])
redis.call('XADD', P .. 'queue', '*', 'run', held)
return held
"""

# ARGV: the tree's set, member, cap, ttl_ms -> 1 if the member is counted (now or before),
# 0 if the tree counts `cap` members already (RunStore.add_tree_run)
TREE_RUN = """
local tree = ARGV[1]
if redis.call('SISMEMBER', tree, ARGV[2]) == 1 then return 1 end
if redis.call('SCARD', tree) >= tonumber(ARGV[3]) then return 0 end
redis.call('SADD', tree, ARGV[2])
redis.call('PEXPIRE', tree, ARGV[4])
return 1
"""


def owner_tag(owner: str | None) -> str:
    """`n` for no owner, else `o{len}:{owner}`: unambiguous inside a key name."""
    return "n" if owner is None else f"o{len(owner)}:{owner}"


def tag_owner(tag: str | None) -> str | None:
    """The owner an `owner_tag` stands for (None for `n`, or no tag)."""
    return tag.partition(":")[2] if tag is not None and tag.startswith("o") else None
