"""The garbage collector of a serving process.

With a thousand live runs the heap holds a few hundred thousand container objects besides
the hundreds of thousands the imports made, and CPython's defaults (a young collection every
700 net allocations, a full one every 100 young ones, each walking the whole heap) spent
about 30% of the server's CPU in collections (3.98 s of ~13 s over 2,000 runs at 1,000
concurrent, measured with `gc.callbacks`). While an app is served: what exists at start-up
(modules, classes, the app itself) is frozen out of every collection, and collections run
less often. Reference counting still frees almost everything at once; only cycles wait
longer. Both are undone when the app stops (tests build many apps in one process)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

THRESHOLDS = (20_000, 20, 20)
"""Young collections every 20,000 net allocations (not 700); the older generations as often
as CPython would, relative to them (a full one every 400 young collections, not 100)."""


@contextmanager
def served_heap() -> Iterator[None]:
    """Tune the collector for the block's length, then restore it."""
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
