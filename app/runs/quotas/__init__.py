"""Quotas per API key (DESIGN §13): the `Quotas` seam (`seam`), and its one-process side
(`local`).

A key (its owner id: a digest of the key, never the key; None when auth is off, which makes
the whole deployment one tenant) may hold at most `concurrent_runs` runs queued, running or
waiting for a person, be admitted at most `runs_per_minute` runs in any 60 s, and spend at
most `tokens_per_day` tokens and `cost_usd_per_day` USD per UTC day. Admission checks every
quota and takes the key's share in one step (`admit`), so concurrent requests never pass a
quota together; past one, `QuotaExceededError`. Each LLM call adds to the key's day (`spend`),
and a running run reads what its key may still spend today at each budget check (`allowance`,
the engine's `Allowances` port): a spent day ends it like a budget.

Two sides, chosen once where the backend is opened (`app.runs.backends.open_backend`):
- `LocalQuotas` (memory, SQLite: one process): checks under a lock per key against what this
  process holds of the key (its day, its minute's admissions, its unended runs: read from
  the store once, then kept here and written through), with no read of the store per run;
- `RedisQuotas` (`app/runs/replicas/redis_quotas.py`, replicas): one Lua script checks and
  takes in Redis, so racing replicas admit no more than the quota.
Both keep the counts in the run store (`RunStore.counters`), so they survive a restart.
"""
