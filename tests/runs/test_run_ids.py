"""Run ids sort by the time they were made (a ULID's milliseconds first): `run_id_at` is the
least id of a moment, so the ids made before it sort before it (the Redis sweep of runs in no
queue reads the runs made more than a POST ago by it)."""

from __future__ import annotations

import time

from app.runs.records import new_run_id, run_id_at


def test_ids_sort_by_when_they_were_made_and_a_moment_s_least_id_comes_first() -> None:
    moment = run_id_at(time.time())
    made = [new_run_id() for _ in range(100)]

    assert made == sorted(made)
    assert len({*made}) == len(made)
    assert run_id_at(time.time() - 60) < moment <= made[0]
    assert len(moment) == len(made[0])
    assert moment.startswith("run_")
