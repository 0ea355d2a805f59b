"""Prometheus metrics of schedules, in the runs' registry: firings by outcome, and the lag
from a due time to its firing."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from app.runs.schedules.records import Firing

_LAGS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 3600)


class ScheduleMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.firings = Counter(
            "finishline_schedule_firings",
            "Firings settled, by outcome (fired, skipped_overlap, refused, invalid, disabled, "
            "missed).",
            ["outcome"],
            registry=registry,
        )
        self.lag = Histogram(
            "finishline_schedule_firing_lag_seconds",
            "From a due time to its firing's run made (fired firings, cron's own only).",
            buckets=_LAGS,
            registry=registry,
        )

    def settled(self, firing: Firing) -> None:
        self.firings.labels(firing.outcome.value).inc()
        if firing.run_id is not None and not firing.manual and firing.fired_at is not None:
            self.lag.observe(max(firing.fired_at - firing.due_at, 0.0))
