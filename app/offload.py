"""The worker thread that takes a request's costly work off the event loop.

Parsing a POST /runs body, validating it and checking its HTTP tools' schemas against the
JSON Schema metaschema cost time in proportion to the request (tens to hundreds of
milliseconds for the largest the caps allow). Done on the event loop, that would stall every
other request; done in worker threads, it still competes with the loop for the interpreter
lock: with eight heavy requests at once, eight threads took turns with the loop and stalled
it 250-570 ms. So this work runs in one thread at a time (`HEAVY`): the loop then shares the
interpreter with one busy thread, and heavy requests queue for their turn behind each other,
not in front of everything else."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, TypeVarTuple, Unpack

import anyio

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

HEAVY = anyio.CapacityLimiter(1)
"""Threads doing a request's costly work at once (parsing, validating, schema checks)."""


async def off_loop(function: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """`function(*args)` in the worker thread, awaited."""
    return await anyio.to_thread.run_sync(function, *args, limiter=HEAVY)
